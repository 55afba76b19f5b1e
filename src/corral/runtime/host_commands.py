"""Running host programs from async code: one helper with a timeout and a captured stderr tail.

Every program the runtime runs on the host (runsc, mkfs.ext4, mount, umount) goes through
``run_command`` so that a hung program is killed (only the process this helper started) and a
failure carries the tail of its stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["CommandError", "CommandResult", "run_command", "stderr_tail"]

_TAIL_CHARS = 2000


class CommandError(Exception):
    """A host program failed, timed out or could not be started."""

    def __init__(self, argv: list[str], message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.argv = argv
        self.returncode = returncode


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: bytes
    stderr: bytes


def stderr_tail(data: bytes | str, limit: int = _TAIL_CHARS) -> str:
    """The last ``limit`` characters of a program's output, stripped, for error messages."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


async def run_command(
    argv: list[str],
    *,
    timeout: float | None = 60.0,
    stdin: int = subprocess.DEVNULL,
    stdout: int = subprocess.PIPE,
    stderr: int = subprocess.PIPE,
    check: bool = True,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Run ``argv`` with stdin on /dev/null (or the fd ``stdin``); raise ``CommandError`` on
    failure when ``check``.

    ``stdout``/``stderr`` may be file descriptors (e.g. a log opened with O_APPEND); then the
    result holds no output for them. ``timeout=None`` waits as long as the command runs (for
    work whose length grows with its input, e.g. a local copy, where the caller can cancel).
    ``env`` replaces the environment (None: this process's).
    """
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=stdin, stdout=stdout, stderr=stderr, env=env
        )
    except OSError as exc:
        raise CommandError(argv, f"cannot run {argv[0]}: {exc}") from exc
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        await _kill(proc)
        raise CommandError(argv, f"{argv[0]} timed out after {timeout:g} s") from None
    except asyncio.CancelledError:
        await _kill(proc)
        raise
    out = out or b""
    err = err or b""
    rc = proc.returncode if proc.returncode is not None else -1
    if check and rc != 0:
        detail = stderr_tail(err or out) or f"exit status {rc}"
        raise CommandError(argv, detail, rc)
    return CommandResult(rc, out, err)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """Kill the process this helper started (by its own pid) and collect it."""
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(Exception):
        await asyncio.shield(proc.wait())
