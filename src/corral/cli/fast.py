"""The `corral` console script: the two commands that must feel instant, without typer or click.

`corral --help` prints the root help from ``_help.txt`` (the full CLI's own output, kept equal to
it by a unit test; regenerate with ``python -m corral.cli.fast --write-help``), and
`corral exec ID -- CMD [ARG]...` with no options runs through ``corral.sdk.plainhttp`` exactly as
the full `exec` verb does. Anything else, including any option or a terminal narrower than the
help, goes to the full CLI (``corral.cli.main``): this module never answers differently from it.

Importing typer and click costs several times the Python start itself (issue 14: `corral
--help` under 100 ms, `corral exec ID -- true` under 150 ms as whole processes).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HELP_FILE = Path(__file__).with_name("_help.txt")
HELP_WIDTH = 80  # click wraps help at min(terminal width, 80)

EXIT_TIMED_OUT = 124  # as corral.cli.exec
EXIT_CANNOT_START = 127
_SHELL_SYNTAX = frozenset(" \t\n|&;<>()$`\\\"'*?[]#~")


def main() -> None:
    """Console-script entry point."""
    argv = sys.argv[1:]
    if argv == ["--help"] and _wide_enough():
        sys.stdout.write(HELP_FILE.read_text())
        return
    if len(argv) >= 4 and argv[0] == "exec" and argv[2] == "--" and not argv[1].startswith("-"):
        sys.exit(_exec(argv[1], argv[3:]))
    from corral.cli.main import main as full

    full()


def _wide_enough() -> bool:
    columns = os.environ.get("COLUMNS")
    if columns is not None:
        return columns.isdigit() and int(columns) >= HELP_WIDTH
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns >= HELP_WIDTH
    except (OSError, ValueError):
        return True  # not a terminal: click wraps at 80


def _exec(sandbox_id: str, command: list[str]) -> int:
    """`corral exec ID -- CMD...` as ``corral.cli.exec.exec_command`` runs it without options;
    errors as the full CLI reports them (one `error:` line, exit 1; 127 when CMD cannot start)."""
    from corral.sdk.errors import AuthenticationError, CorralError, ExecFailed
    from corral.sdk.plainhttp import run_exec

    out, err = sys.stdout.buffer, sys.stderr.buffer

    def relay(event: object) -> None:
        kind, data = getattr(event, "type", ""), getattr(event, "data", b"")
        stream = out if kind == "stdout" else err if kind == "stderr" else None
        if stream is not None:
            stream.write(data)
            stream.flush()

    shell_line = len(command) == 1 and any(char in _SHELL_SYNTAX for char in command[0])
    cmd: str | list[str] = command[0] if shell_line else command
    try:
        result = run_exec(sandbox_id, cmd, env={}, on_event=relay)
    except ExecFailed as exc:
        return _error(str(exc), EXIT_CANNOT_START)
    except AuthenticationError as exc:
        return _error(f"{exc} (check CORRAL_API_KEY or --api-key)")
    except CorralError as exc:
        return _error(str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1
    except OSError as exc:
        return _error(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
    if result.dropped_bytes:
        print(f"corral: {result.dropped_bytes} bytes of output were dropped", file=sys.stderr)
    return result.exit_code if 0 <= result.exit_code <= 255 else 1


def _error(message: str, code: int = 1) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def render_full_help() -> str:
    """The full CLI's root help, as it prints it where this module serves ``_help.txt``."""
    import subprocess

    code = "from corral.cli.main import main; main()"
    env = {**os.environ, "COLUMNS": str(HELP_WIDTH)}
    run = [sys.executable, "-c", code, "--help"]
    return subprocess.run(run, capture_output=True, text=True, env=env, check=True).stdout


if __name__ == "__main__" and sys.argv[1:] == ["--write-help"]:
    HELP_FILE.write_text(render_full_help())
