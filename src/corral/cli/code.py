"""`corral run-code ID FILE|-`: run code in a sandbox's code interpreter, keeping its state."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from corral.cli._state import client, parse_pairs, print_json

if TYPE_CHECKING:
    from corral.sdk.code import OutputMessage, Result

__all__ = ["run_code"]

EXIT_ERROR = 1
EXIT_TIMED_OUT = 124  # like coreutils `timeout` and `corral exec`


def _describe(result: Result) -> str | None:
    if result.text is not None and not (result.png or result.svg or result.jpeg):
        return result.text
    kinds = [f for f in result.formats() if f != "text"]
    return f"[{', '.join(kinds)}]" + (f" {result.text}" if result.text else "") if kinds else None


def run_code(
    ctx: typer.Context,
    sandbox_id: str = typer.Argument(..., metavar="ID"),
    source: str | None = typer.Argument(
        None, metavar="FILE|-", help="A file of code, or - (the default) for stdin."
    ),
    code: str | None = typer.Option(None, "--code", "-c", help="The code itself."),
    language: str | None = typer.Option(
        None, "--language", "-l", help="python (the default), bash, or another installed kernel."
    ),
    context: str | None = typer.Option(None, "--context", help="Run in this context (its id)."),
    env: list[str] = typer.Option([], "--env", help="K=V for this run only (repeatable)."),
    timeout: float | None = typer.Option(
        None, "--timeout", help="Interrupt after S seconds (exit 124; the state stays)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the whole execution as JSON."),
) -> None:
    """Run code in sandbox ID's code interpreter (a template made `--with code-interpreter`).

    Variables stay between runs. Output streams here; the last expression's value is printed
    after it (plots as `[png]`; --json gives them whole, base64). Exits 1 if the code raised,
    124 if the timeout interrupted it."""
    if code is None:
        if source in (None, "-"):
            code = sys.stdin.read()
        else:
            path = Path(str(source))
            if not path.is_file():
                raise typer.BadParameter(f"{source} is not a file (use -c CODE for code)")
            code = path.read_text()

    def relay(message: OutputMessage) -> None:
        stream = sys.stderr if message.error else sys.stdout
        stream.write(message.line)
        stream.flush()

    sandbox = client(ctx).sandbox(sandbox_id)
    execution = sandbox.run_code(
        code,
        language=language,
        context=context,
        on_stdout=None if as_json else relay,
        on_stderr=None if as_json else relay,
        env=parse_pairs(env, "--env") or None,
        timeout=timeout,
    )
    if as_json:
        from dataclasses import asdict

        data: dict[str, Any] = asdict(execution)
        print_json(data)
    else:
        for result in execution.results:
            text = _describe(result)
            if text is not None:
                typer.echo(text)
        if execution.error is not None:
            err = execution.error
            sys.stderr.write((err.traceback or f"{err.name}: {err.value}").rstrip() + "\n")
    if execution.error is not None:
        raise typer.Exit(EXIT_TIMED_OUT if execution.error.name == "TimeoutError" else EXIT_ERROR)
