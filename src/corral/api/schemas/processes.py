"""Processes on the wire: exec and PTY requests, process listings and signals, and the code
interpreter's executions and contexts.

Part of the HTTP API's contract (``corral.api.schemas``): field names are stable; new fields may
be added, none removed or renamed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CodeContext",
    "CodeContextCreate",
    "CodeContextList",
    "CodeExecution",
    "ExecRequest",
    "ProcessInfo",
    "ProcessList",
    "ProcessStarted",
    "PtyRequest",
    "ResizeRequest",
    "SignalRequest",
]


class ExecRequest(BaseModel):
    """Run a command: ``cmd`` (argv) or ``shell`` (a /bin/sh -c string), exactly one."""

    model_config = ConfigDict(extra="forbid")

    cmd: list[str] | None = Field(default=None, min_length=1)
    shell: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    user: str | None = None
    stdin: bool = Field(default=False, description="keep stdin open for later input")
    timeout: float | None = Field(
        default=None, gt=0, description="seconds; the process is killed after it"
    )
    background: bool = Field(default=False, description="return a pid at once instead of streaming")
    tag: str | None = None


class PtyRequest(BaseModel):
    """Start a command on a new pseudo-terminal; without ``cmd``, the user's login shell."""

    model_config = ConfigDict(extra="forbid")

    cmd: list[str] | None = Field(default=None, min_length=1)
    rows: int = Field(default=24, ge=1, le=4096)
    cols: int = Field(default=80, ge=1, le=4096)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    user: str | None = None
    tag: str | None = None


class ResizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rows: int = Field(ge=1, le=4096)
    cols: int = Field(ge=1, le=4096)


class ProcessStarted(BaseModel):
    pid: int


class ProcessInfo(BaseModel):
    pid: int
    cmd: list[str]
    tag: str | None = None
    running: bool
    exit_code: int | None = None
    signal: int | None = None
    started_at: float
    ended_at: float | None = None
    pty: bool = Field(default=False, description="runs on a pseudo-terminal (POST /pty)")


class ProcessList(BaseModel):
    processes: list[ProcessInfo]


class SignalRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    signal: str | int = "SIGTERM"


# -- code interpreter ---------------------------------------------------------------------------
class CodeExecution(BaseModel):
    """``POST /v1/sandboxes/{id}/code/execute``: E2B's execution request, plus ``timeout``."""

    model_config = ConfigDict(extra="ignore")  # E2B's SDKs add fields; the known ones matter

    code: str = Field(max_length=8 * 1024 * 1024)
    language: str | None = Field(default=None, max_length=64, examples=["python", "bash"])
    context_id: str | None = Field(default=None, max_length=128)
    env_vars: dict[str, str] | None = None
    timeout: float | None = Field(
        default=None, gt=0, le=86400, description="seconds; the code is interrupted after them"
    )


class CodeContextCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    language: str | None = Field(default=None, max_length=64)
    cwd: str | None = Field(default=None, max_length=4096)


class CodeContext(BaseModel):
    id: str
    language: str
    cwd: str


class CodeContextList(BaseModel):
    contexts: list[CodeContext]
