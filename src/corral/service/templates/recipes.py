"""Recipes: named, readable sets of build steps and template defaults (``--with NAME``).

A recipe is a TOML file in ``corral/recipes/`` (``code-interpreter.toml``, ``dev.toml``)::

    description = "..."             what it adds, one line
    memory_mib = 1024               defaults the template takes unless the request sets them
    warm = true
    start = ["prog", "arg"]         the template's start command
    warmup = "shell command"
    interpreter_dir = "/opt/..."    where corral's code interpreter server is written
    [labels]                        template labels (``corral.start.restart``: the agent
                                    restarts the start command whenever it exits)
    [[steps]]
    run = "shell command"           a RUN step, as root

``expand`` turns recipes into build steps: the interpreter's files, the recipes' RUN steps with
the host's package settings in their environment (``images/host_packages.py``), and, if a CA
bundle was copied in for them, a last step that removes it again (one build is one layer, so it
leaves no trace in the image). Recipes are applied in the order given, before the request's own
steps.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from corral.images.host_packages import HostPackageSettings
from corral.images.steps import BuildStep
from corral.service.errors import InvalidRequest

__all__ = ["Recipe", "RecipeExpansion", "expand", "list_recipes", "load_recipe"]

_INTERPRETER_FILES = (
    "__init__.py",
    "__main__.py",
    "kernels.py",
    "execution.py",
    "server.py",
    "warm.py",
)


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    steps: tuple[str, ...]
    start: tuple[str, ...] | None = None
    warmup: str | None = None
    warm: bool = False
    memory_mib: int | None = None
    interpreter_dir: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    digest: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "steps": list(self.steps),
            "start_cmd": list(self.start) if self.start else None,
            "warmup": self.warmup,
            "warm": self.warm,
            "memory_mib": self.memory_mib,
            "labels": dict(self.labels),
            "digest": self.digest,
        }


@dataclass
class RecipeExpansion:
    """What recipes add to a build: steps before the request's, one after all, and defaults."""

    steps: list[BuildStep]
    cleanup: list[BuildStep]
    start: list[str] | None = None
    warmup: str | None = None
    warm: bool = False
    memory_mib: int | None = None


def _recipe_dir() -> Any:
    return resources.files("corral").joinpath("recipes")


def _interpreter_sources() -> dict[str, bytes]:
    package = resources.files("corral").joinpath("interpreter")
    return {name: package.joinpath(name).read_bytes() for name in _INTERPRETER_FILES}


def load_recipe(name: str) -> Recipe:
    """The recipe called ``name``; InvalidRequest naming the known ones if there is none."""
    known = list_recipes()
    for recipe in known:
        if recipe.name == name:
            return recipe
    names = ", ".join(r.name for r in known)
    raise InvalidRequest(f"no recipe {name!r}: known recipes are {names}")


def list_recipes() -> list[Recipe]:
    found = []
    for entry in sorted(_recipe_dir().iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".toml"):
            continue
        raw = entry.read_bytes()
        data = tomllib.loads(raw.decode())
        digest = hashlib.sha256(raw)
        if data.get("interpreter_dir"):
            for name, source in sorted(_interpreter_sources().items()):
                digest.update(name.encode() + b"\0" + source)
        found.append(
            Recipe(
                name=entry.name[: -len(".toml")],
                description=str(data.get("description", "")),
                steps=tuple(str(step["run"]) for step in data.get("steps", [])),
                start=tuple(data["start"]) if data.get("start") else None,
                warmup=data.get("warmup"),
                warm=bool(data.get("warm", False)),
                memory_mib=data.get("memory_mib"),
                interpreter_dir=data.get("interpreter_dir"),
                labels={str(k): str(v) for k, v in data.get("labels", {}).items()},
                digest=digest.hexdigest()[:16],
            )
        )
    return found


def _file_step(path: str, data: bytes) -> BuildStep:
    return BuildStep("file", {"path": path, "data": data, "mode": 0o644}, text=f"FILE {path}")


def expand(names: list[str], host: HostPackageSettings) -> RecipeExpansion:
    """Build steps and defaults for ``names`` (each at most once, in order)."""
    recipes = []
    for name in names:
        recipe = load_recipe(name)
        if recipe not in recipes:
            recipes.append(recipe)
    out = RecipeExpansion(steps=[], cleanup=[])
    for path, data in sorted(host.files.items()):
        out.steps.append(_file_step(path, data))
    if host.files:
        paths = " ".join(sorted({p.rsplit("/", 1)[0] for p in host.files}))
        out.cleanup.append(BuildStep("run", f"rm -rf {paths}", text=f"RUN rm -rf {paths}"))
    for recipe in recipes:
        if recipe.labels:
            out.steps.append(BuildStep("label", dict(recipe.labels)))
        for command in recipe.steps:
            out.steps.append(
                BuildStep("run", command, text=f"RUN {command}", build_env=dict(host.env))
            )
        if recipe.interpreter_dir:
            for name, source in sorted(_interpreter_sources().items()):
                path = f"{recipe.interpreter_dir.rstrip('/')}/{name}"
                out.steps.append(_file_step(path, source))
        out.start = list(recipe.start) if recipe.start else out.start
        out.warmup = recipe.warmup or out.warmup
        out.warm = out.warm or recipe.warm
        if recipe.memory_mib:
            out.memory_mib = max(out.memory_mib or 0, int(recipe.memory_mib))
    return out
