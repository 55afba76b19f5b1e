"""Files in a sandbox: an entry as stat or a listing gives it, and what a write wrote."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral.sdk._exec_models import _Wire

__all__ = ["FileInfo", "WriteResult"]


@dataclass(frozen=True, slots=True)
class FileInfo(_Wire):
    name: str
    path: str
    type: str
    size: int
    mode: int
    mtime: float
    target: str | None = None

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> FileInfo:
        return cls(
            name=str(data.get("name", "")),
            path=str(data.get("path", "")),
            type=str(data.get("type", "other")),
            size=int(data.get("size", 0)),
            mode=int(data.get("mode", 0)),
            mtime=float(data.get("mtime", 0.0)),
            target=data.get("target"),
        )


@dataclass(frozen=True, slots=True)
class WriteResult(_Wire):
    path: str
    size: int

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> WriteResult:
        return cls(path=str(data.get("path", "")), size=int(data.get("size", 0)))
