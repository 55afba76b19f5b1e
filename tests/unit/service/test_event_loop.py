"""No blocking disk work on the service's event loop: ruff's ASYNC rules catch ``open`` and
``os.path``; this catches what they do not know, the calls that walk or remove whole trees
(``shutil.rmtree``, image sealing and sizing), when made directly in an ``async def``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import corral

SERVICE = Path(corral.__file__).parent / "service"
BLOCKING = {
    "shutil.rmtree",
    "seal_image",
    "image_size_mib",
    "make_private",
    "remove_parked_image",
}


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return func.id if isinstance(func, ast.Name) else ""


def _blocking_calls(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_async: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.AsyncFunctionDef):
                visit(child, True)
            elif isinstance(child, (ast.FunctionDef, ast.Lambda)):
                visit(child, False)  # a sync helper: run in a thread by whoever awaits it
            else:
                if in_async and isinstance(child, ast.Call) and _name(child.func) in BLOCKING:
                    found.append((child.lineno, _name(child.func)))
                visit(child, in_async)

    visit(tree, False)
    return found


@pytest.mark.parametrize(
    "path", sorted(SERVICE.rglob("*.py")), ids=lambda p: str(p.relative_to(SERVICE))
)
def test_no_tree_walks_on_the_event_loop(path: Path) -> None:
    calls = _blocking_calls(ast.parse(path.read_text(), str(path)))
    assert not calls, f"service/{path.relative_to(SERVICE)}: " + ", ".join(
        f"line {line}: {name}(...) in an async def; await asyncio.to_thread({name}, ...)"
        for line, name in calls
    )


def test_the_check_sees_a_blocking_call() -> None:
    tree = ast.parse("import shutil\nasync def f(p):\n    shutil.rmtree(p)\n")
    assert _blocking_calls(tree) == [(3, "shutil.rmtree")]
    tree = ast.parse(
        "import asyncio, shutil\nasync def f(p):\n    await asyncio.to_thread(shutil.rmtree, p)\n"
    )
    assert _blocking_calls(tree) == []
