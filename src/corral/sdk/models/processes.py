"""Processes in a sandbox: one as the agent lists it (exec results and events are
``corral.sdk._exec_models``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral.sdk._exec_models import _Wire

__all__ = ["ProcessInfo"]


@dataclass(frozen=True, slots=True)
class ProcessInfo(_Wire):
    pid: int
    cmd: list[str]
    running: bool
    started_at: float
    tag: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    ended_at: float | None = None
    pty: bool = False

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ProcessInfo:
        return cls(
            pid=int(data["pid"]),
            cmd=list(data.get("cmd") or []),
            running=bool(data.get("running", False)),
            started_at=float(data.get("started_at", 0.0)),
            tag=data.get("tag"),
            exit_code=data.get("exit_code"),
            signal=data.get("signal"),
            ended_at=data.get("ended_at"),
            pty=bool(data.get("pty", False)),
        )
