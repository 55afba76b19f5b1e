"""The sync SDK is the async core, wrapped: ``sync.py`` is what ``scripts/gen_sync_sdk.py`` writes
from the async classes, and every public method, property and attribute of an async class has a
sync twin of the same name (``aclose`` -> ``close``...) and the same signature, less ``async``."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest

import corral.sdk as sdk

REPO = Path(__file__).resolve().parents[3]
GENERATOR = REPO / "scripts" / "gen_sync_sdk.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_sync_sdk", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


GEN = _generator()
PAIRS = [(name, name.removeprefix("Async")) for name, _ in GEN.WRAPPED]


def _sync_text(annotation: Any) -> Any:
    """An async signature's annotation as the sync twin spells it."""
    if not isinstance(annotation, str):
        return annotation
    return GEN.sync_annotation(ast.parse(annotation, mode="eval").body)


def _public_members(cls: type) -> dict[str, Any]:
    members = {}
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in GEN.RENAMED:
            continue
        if (cls.__name__, name) in GEN.ASYNC_ONLY:
            continue
        members[GEN.RENAMED.get(name) or GEN.RENAMED_PUBLIC.get(name, name)] = value
    return members


def _signature(value: Any) -> inspect.Signature:
    function = value.fget if isinstance(value, property) else value
    if isinstance(function, classmethod | staticmethod):
        function = function.__func__
    return inspect.signature(cast(Callable[..., Any], function))


def test_sync_py_is_generated_from_the_async_core() -> None:
    check = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize(("async_name", "sync_name"), PAIRS)
def test_every_public_async_member_has_a_sync_twin_of_the_same_signature(
    async_name: str, sync_name: str
) -> None:
    async_cls, sync_cls = getattr(sdk, async_name), getattr(sdk, sync_name)
    sync_members = vars(sync_cls)
    for name, value in _public_members(async_cls).items():
        if name == "__init__":
            continue
        assert name in sync_members, f"{sync_name}.{name} is missing (twin of {async_name})"
        if name in ("__enter__", "__exit__", "__iter__", "__repr__"):
            continue
        twin = sync_members[name]
        assert isinstance(twin, property) == isinstance(value, property), name
        assert isinstance(twin, classmethod) == isinstance(value, classmethod), name
        theirs, ours = _signature(value), _signature(twin)
        expected = [
            p.replace(annotation=_sync_text(p.annotation)) for p in theirs.parameters.values()
        ]
        assert list(ours.parameters.values()) == expected, f"{sync_name}.{name}"
        returns = _sync_text(theirs.return_annotation)
        if returns == "_Opening":
            returns = sync_name  # an awaitable opening: the sync twin returns it opened
        assert ours.return_annotation == returns, f"{sync_name}.{name} returns"


@pytest.mark.parametrize(("async_name", "sync_name"), PAIRS)
def test_public_attributes_have_sync_twins(async_name: str, sync_name: str) -> None:
    source = Path(inspect.getfile(getattr(sdk, async_name))).read_text()
    [cls] = [
        n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == async_name
    ]
    sync_cls = getattr(sdk, sync_name)
    for attribute, _wrapped in GEN.public_attributes(cls):
        if (async_name, attribute) in GEN.ASYNC_ONLY:
            continue
        if _wrapped is None:
            assert isinstance(vars(sync_cls).get(attribute), property), attribute
        else:
            init = inspect.getsource(sync_cls.__init__)
            assert f"self.{attribute} = {_wrapped}(" in init, attribute


def test_constructible_twins_take_the_async_constructor_parameters() -> None:
    for async_name in GEN.CONSTRUCTIBLE:
        async_cls = getattr(sdk, async_name)
        sync_cls = getattr(sdk, async_name.removeprefix("Async"))
        assert inspect.signature(sync_cls.__init__) == inspect.signature(async_cls.__init__)
