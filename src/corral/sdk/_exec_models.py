"""The two result types of an exec (``ProcessEvent``, ``ExecResult``) and the ``_Wire`` mixin,
apart from the rest of ``corral.sdk.models`` (which re-exports them, their public home): the
plain-HTTP exec path (``corral.sdk.plainhttp``, the CLI's `corral exec`) needs only these, and
building the other dataclasses costs more than that whole command's own work."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


class _Wire:
    """Mixin: JSON-ready dict of a dataclass."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = dataclasses.asdict(self)  # type: ignore[call-overload]
        return data


@dataclass(frozen=True, slots=True)
class ProcessEvent:
    """One event of a process's stream.

    `type` is start, stdout, stderr, truncated or exit; `data` holds the decoded bytes of an
    output event; `exit_code`/`signal`/`timed_out` are set on exit; `pid` on start.
    """

    seq: int
    type: str
    data: bytes = b""
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    dropped_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ExecResult(_Wire):
    """The outcome of a finished command.

    `exit_code` is the command's status; a command killed by a signal reports 128 + signal, like
    a shell, and `signal` says which. `stdout`/`stderr` are the output decoded as UTF-8 (invalid
    bytes replaced); `stdout_bytes`/`stderr_bytes` are the exact bytes. `dropped_bytes` counts
    output the agent had to drop because its buffer was full.
    """

    exit_code: int
    stdout: str
    stderr: str
    stdout_bytes: bytes
    stderr_bytes: bytes
    pid: int
    timed_out: bool = False
    signal: int | None = None
    dropped_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


for _public in (ProcessEvent, ExecResult):
    _public.__module__ = "corral.sdk.models"
