"""Files on the wire: stat and listing results, mkdir, move and write.

Part of the HTTP API's contract (``corral.api.schemas``): field names are stable; new fields may
be added, none removed or renamed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["FileList", "FileStat", "MkdirRequest", "MkdirResult", "MoveRequest", "WriteResult"]


class FileStat(BaseModel):
    name: str
    path: str
    type: Literal["file", "dir", "symlink", "other"]
    size: int
    mode: int
    mtime: float
    target: str | None = None


class FileList(BaseModel):
    entries: list[FileStat]


class MkdirRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    parents: bool = True


class MkdirResult(BaseModel):
    created: bool


class MoveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    src: str
    dst: str


class WriteResult(BaseModel):
    path: str
    size: int
