"""`corral serve` and `corral mcp`: the verbs that run a server in the foreground.

Both import their server lazily, so the other verbs never load the daemon or the MCP SDK.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from corral.cli._state import state

__all__ = ["DEFAULT_DATA_DIR", "DEFAULT_LISTEN", "mcp", "serve"]

DEFAULT_DATA_DIR = Path("/var/lib/corral")
DEFAULT_LISTEN = "127.0.0.1:7070"


def serve(
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help=f"Where state is kept (default {DEFAULT_DATA_DIR})."
    ),
    listen: str | None = typer.Option(
        None, "--listen", help=f"HOST:PORT to listen on (default {DEFAULT_LISTEN})."
    ),
) -> None:
    """Run the corral daemon in the foreground."""
    # Unset options stay None so the daemon's settings (and their environment) decide.
    _daemon_entry_point()(data_dir=data_dir, listen=listen)


def _daemon_entry_point() -> Callable[..., None]:
    """The daemon's ``serve(data_dir=, listen=)``, imported only when serving."""
    from corral.api.server import serve as run_daemon

    return run_daemon


def mcp(
    ctx: typer.Context,
    template: str = typer.Option("base", "--template", "-t", help="Template for new sandboxes."),
) -> None:
    """Run an MCP server on stdio that gives an agent sandboxes (run_code, run_command, ...)."""
    from corral.mcp.server import run_stdio

    options = state(ctx)
    run_stdio(template=template, url=options.url, api_key=options.api_key)
