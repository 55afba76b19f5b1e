"""A validated template build (``BuildPlan``) and how a build fails (``BuildFailed``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from corral.images.oci import ImageSource
from corral.images.steps import BuildStep
from corral.runtime.base import Resources
from corral.storage import TemplateRecord

__all__ = ["BuildFailed", "BuildPlan"]


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
