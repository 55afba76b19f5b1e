"""`corral shell`: an interactive terminal in a sandbox, exiting with the remote shell's status.

The local terminal goes into raw mode (restored on every way out), so every key, Ctrl-C
included, travels to the sandbox's terminal, whose line discipline acts on it; a SIGWINCH
here resizes the terminal there. Without a local terminal, stdin is forwarded as it is.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING

import typer

from corral.cli._state import client, parse_pairs
from corral.sdk.errors import CorralError

if TYPE_CHECKING:  # the SDK's stream machinery loads when the verb runs, not for --help
    from corral.sdk import Pty

__all__ = ["shell"]

READ_SIZE = 64 * 1024


def shell(
    ctx: typer.Context,
    sandbox_id: str = typer.Argument(..., metavar="ID"),
    command: list[str] | None = typer.Argument(None, metavar="[-- CMD [ARG]...]"),
    env: list[str] = typer.Option([], "--env", help="K=V, repeatable."),
    cwd: str | None = typer.Option(None, "--cwd", help="Working directory in the sandbox."),
    user: str | None = typer.Option(None, "--user", help="Run as this user."),
) -> None:
    """Open an interactive terminal in sandbox ID (its login shell, or CMD); exit with its
    status. Keys, Ctrl-C included, go to the sandbox; the window size follows this one."""
    stdin_fd, stdout_fd = sys.stdin.fileno(), sys.stdout.fileno()
    rows, cols = _size(stdout_fd)
    sandbox = client(ctx).sandbox(sandbox_id)
    pty = sandbox.pty.create(
        rows, cols, command or None, env=parse_pairs(env, "--env"), cwd=cwd, user=user
    )
    saved = None
    if os.isatty(stdin_fd):
        import termios
        import tty

        saved = termios.tcgetattr(stdin_fd)
        tty.setraw(stdin_fd)
    resized = threading.Event()
    previous = signal.getsignal(signal.SIGWINCH)

    def on_winch(signum: int, frame: FrameType | None) -> None:
        resized.set()

    signal.signal(signal.SIGWINCH, on_winch)
    done = threading.Event()
    threading.Thread(target=_forward_input, args=(pty, stdin_fd, done), daemon=True).start()
    threading.Thread(
        target=_forward_resizes, args=(pty, stdout_fd, resized, done), daemon=True
    ).start()
    try:
        for data in pty:
            view = memoryview(data)
            while view:
                view = view[os.write(stdout_fd, view) :]
    finally:
        done.set()
        resized.set()
        signal.signal(signal.SIGWINCH, previous)
        if saved is not None:
            import termios

            termios.tcsetattr(stdin_fd, termios.TCSADRAIN, saved)
    code = pty.exit_code if pty.exit_code is not None else 1
    raise typer.Exit(code if 0 <= code <= 255 else 1)


def _size(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 24, 80
    return max(size.lines, 1), max(size.columns, 1)


def _forward_input(pty: Pty, fd: int, done: threading.Event) -> None:
    while not done.is_set():
        try:
            data = os.read(fd, READ_SIZE)
        except OSError:
            return
        if not data or done.is_set():
            return
        try:
            pty.send(data)
        except CorralError:
            return  # the terminal has gone; the output loop sees its exit


def _forward_resizes(pty: Pty, fd: int, resized: threading.Event, done: threading.Event) -> None:
    while True:
        resized.wait()
        resized.clear()
        if done.is_set():
            return
        try:
            pty.resize(*_size(fd))
        except CorralError:
            return
