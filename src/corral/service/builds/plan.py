"""A template build: what a user asks (``BuildRequest``), the validated plan (``BuildPlan``,
made by ``BuildService.plan``) and how a build fails (``BuildFailed``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from corral.images.oci import ImageSource
from corral.images.steps import BuildStep
from corral.runtime.base import Resources
from corral.storage import TemplateRecord

__all__ = ["BuildFailed", "BuildPlan", "BuildRequest"]


@dataclass
class BuildRequest:
    """What a user asks to build (the API body, already parsed; validated by ``plan``).
    ``context_dir`` is a host path, always refused: it is kept to say so clearly."""

    name: str
    base: str | None = None
    steps: list[BuildStep] = field(default_factory=list)
    dockerfile: str | None = None
    context: str | None = None
    context_dir: str | None = None
    build_args: dict[str, str] = field(default_factory=dict)
    creds: str | None = None
    insecure: bool = False
    cpu: float | None = None
    memory_mib: int | None = None
    disk_mib: int | None = None
    max_cpu: float | None = None
    max_memory_mib: int | None = None
    max_disk_mib: int | None = None
    start_cmd: list[str] | None = None
    warmup: str | None = None
    warm: bool = False
    pool: int = 0
    tags: list[str] = field(default_factory=list)
    step_timeout: float | None = None
    build_disk_mib: int | None = None
    network: str | None = None
    shared: bool | None = None  # None: as before for a rebuild, else an admin's are shared
    recipes: list[str] = field(default_factory=list)  # templates/recipes.py: before the steps


class BuildFailed(Exception):
    """A build step failed; ``index`` and ``exit_code`` say which and how."""

    def __init__(self, message: str, *, index: int | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.index = index
        self.exit_code = exit_code


@dataclass
class BuildPlan:
    """A validated build: where to start from and what to do. ``base`` is a template record to
    build on, or ``source`` an image to import; ``template`` holds the new template's fields
    (image filled in at the end); ``tags`` are the further names the result gets."""

    template: TemplateRecord
    steps: list[BuildStep]
    base: TemplateRecord | None = None
    source: ImageSource | None = None
    source_label: str | None = None
    context: Path | None = None
    tags: list[str] = field(default_factory=list)
    build_args: dict[str, str] = field(default_factory=dict)
    resources: Resources | None = None
    step_timeout: float = 1800.0
    network: str = "internet"
    uploads: list[str] = field(default_factory=list)
    """Ids of the uploads the build reads; ``start_build`` takes them over into ``owned``."""
    owned: list[Path] = field(default_factory=list)
    """Private dirs the build took over (its uploads); removed when it ends."""

    @property
    def needs_sandbox(self) -> bool:
        return any(step.kind in ("run", "copy", "workdir") for step in self.steps)

    @property
    def label(self) -> str:
        if self.source_label:
            return self.source_label
        return str(self.source) if self.source else (self.base.name if self.base else "")
