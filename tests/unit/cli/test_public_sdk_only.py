"""The CLI is an edge over the public SDK: it imports no private module or name of the SDK and
reaches into no private attribute of an SDK object (``_async``, ``_portal``...). What the CLI
needs that the SDK lacks goes into the SDK's public surface first."""

from __future__ import annotations

import ast
from pathlib import Path

import corral.cli

CLI_DIR = Path(corral.cli.__file__).parent


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("corral."):
            parts = node.module.split(".")
            if parts[1] != "cli" and any(p.startswith("_") for p in parts):
                found.append(f"{where}: imports private module {node.module}")
            if parts[1] != "cli":
                found += [
                    f"{where}: imports private name {a.name} from {node.module}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
        elif isinstance(node, ast.Import):
            found += [
                f"{where}: imports private module {a.name}"
                for a in node.names
                if a.name.startswith("corral.")
                and a.name.split(".")[1] != "cli"
                and any(p.startswith("_") for p in a.name.split("."))
            ]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not (node.attr.startswith("__") and node.attr.endswith("__"))
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"{where}: reaches into private attribute .{node.attr}")
    return found


def test_the_cli_uses_only_the_public_sdk() -> None:
    modules = sorted(CLI_DIR.glob("*.py"))
    assert len(modules) > 10
    violations = [v for path in modules for v in _violations(path)]
    assert violations == []


def test_the_check_catches_what_it_forbids(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from corral.sdk._portal import portal\n"
        "from corral.sdk.sandbox import _Opening\n"
        "import corral.sdk._http\n"
        "x = client._async\n"
        "from corral.cli._state import client\n"  # the CLI's own private module is fine
        "y = self._cache\n"
    )
    assert [v.split(": ", 1)[1] for v in _violations(bad)] == [
        "imports private module corral.sdk._portal",
        "imports private name _Opening from corral.sdk.sandbox",
        "imports private module corral.sdk._http",
        "reaches into private attribute ._async",
    ]
