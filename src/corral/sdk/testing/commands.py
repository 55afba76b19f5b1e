"""The fake daemon's tiny command interpreter: what a command "prints" and how it exits."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

__all__ = ["CommandOutcome", "default_run"]


@dataclass
class CommandOutcome:
    """What a fake command produced."""

    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int | None = 0
    timed_out: bool = False


def default_run(argv: list[str], stdin: bytes, timeout: float | None) -> CommandOutcome:
    """A tiny command interpreter for the fake: enough for tests to see output and exit codes."""
    if argv[:2] == ["/bin/sh", "-c"]:
        argv = shlex.split(argv[2])
    program, args = argv[0], argv[1:]
    if program == "echo":
        return CommandOutcome(stdout=(" ".join(args) + "\n").encode())
    if program == "cat":
        return CommandOutcome(stdout=stdin)
    if program in ("true", "false"):
        return CommandOutcome(exit_code=0 if program == "true" else 1)
    if program == "exit":
        return CommandOutcome(exit_code=int(args[0]) if args else 0)
    if program == "sleep":
        timed_out = timeout is not None and float(args[0]) > timeout
        return CommandOutcome(timed_out=timed_out)
    if program in ("python3", "bash", "sh") and args[:1] == ["-c"]:
        return CommandOutcome(stdout=f"{program} ran: {args[1]}".encode())
    return CommandOutcome(stderr=f"{program}: not in the fake's repertoire\n".encode(), exit_code=2)
