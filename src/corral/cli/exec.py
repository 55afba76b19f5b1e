"""`corral exec`: run a command in a sandbox, streaming its output, exiting with its status."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from corral.cli._state import client, parse_pairs, state
from corral.sdk.errors import ExecFailed

if TYPE_CHECKING:
    from corral.sdk.models import ProcessEvent

__all__ = ["EXIT_CANNOT_START", "EXIT_TIMED_OUT", "exec_command"]

EXIT_TIMED_OUT = 124  # like coreutils `timeout`
EXIT_CANNOT_START = 127  # like a shell's "command not found"


def exec_command(
    ctx: typer.Context,
    sandbox_id: str = typer.Argument(..., metavar="ID"),
    command: list[str] = typer.Argument(..., metavar="-- CMD [ARG]..."),
    env: list[str] = typer.Option([], "--env", help="K=V, repeatable."),
    cwd: str | None = typer.Option(None, "--cwd", help="Working directory in the sandbox."),
    user: str | None = typer.Option(None, "--user", help="Run as this user."),
    timeout: float | None = typer.Option(
        None, "--timeout", help="Kill after S seconds (exit 124)."
    ),
    stdin: bool = typer.Option(False, "--stdin", help="Send this command's stdin to CMD."),
) -> None:
    """Run CMD in sandbox ID; its stdout and stderr stream here, and its status is ours.

    A single argument with shell syntax in it runs through the sandbox's shell
    (`corral exec ID -- 'ls | wc -l'`); otherwise the arguments are the argv.
    Exits 124 when the timeout killed it, 127 when it could not be started.
    """
    out = typer.get_binary_stream("stdout")
    err = typer.get_binary_stream("stderr")

    def relay(event: ProcessEvent) -> None:
        stream = out if event.type == "stdout" else err if event.type == "stderr" else None
        if stream is not None:
            stream.write(event.data)
            stream.flush()

    cmd: str | list[str] = command[0] if _is_shell_line(command) else command
    try:
        if stdin:
            result = (
                client(ctx)
                .sandbox(sandbox_id)
                .exec(
                    cmd,
                    env=parse_pairs(env, "--env"),
                    cwd=cwd,
                    user=user,
                    timeout=timeout,
                    stdin=typer.get_binary_stream("stdin"),
                    on_event=relay,
                )
            )
        else:  # the common case: no httpx, asyncio or loop thread for a plain-http daemon
            from corral.sdk.plainhttp import run_exec

            options = state(ctx)
            result = run_exec(
                sandbox_id,
                cmd,
                url=options.url,
                api_key=options.api_key,
                env=parse_pairs(env, "--env"),
                cwd=cwd,
                user=user,
                timeout=timeout,
                on_event=relay,
                transport=options.transport,
            )
    except ExecFailed as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_CANNOT_START) from None
    if result.dropped_bytes:
        typer.echo(f"corral: {result.dropped_bytes} bytes of output were dropped", err=True)
    if result.timed_out:
        typer.echo(f"corral: timed out after {timeout:g} s", err=True)
        raise typer.Exit(EXIT_TIMED_OUT)
    raise typer.Exit(result.exit_code if 0 <= result.exit_code <= 255 else 1)


_SHELL_SYNTAX = frozenset(" \t\n|&;<>()$`\\\"'*?[]#~")


def _is_shell_line(command: list[str]) -> bool:
    return len(command) == 1 and any(char in _SHELL_SYNTAX for char in command[0])
