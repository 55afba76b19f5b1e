"""`corral serve` and `corral mcp`: the verbs that run a server in the foreground.

Both import their server lazily, so the other verbs never load the daemon or the MCP SDK.
"""

from __future__ import annotations

from pathlib import Path

import typer

from corral.cli._state import state

__all__ = ["DEFAULT_DATA_DIR", "DEFAULT_LISTEN", "mcp", "serve"]

DEFAULT_DATA_DIR = Path("/var/lib/corral")
DEFAULT_LISTEN = "127.0.0.1:7070"


def serve(
    data_dir: Path = typer.Option(DEFAULT_DATA_DIR, "--data-dir", help="Where state is kept."),
    listen: str = typer.Option(DEFAULT_LISTEN, "--listen", help="HOST:PORT to listen on."),
) -> None:
    """Run the corral daemon in the foreground."""
    from corral.service.daemon import serve as run_daemon

    run_daemon(data_dir=data_dir, listen=listen)


def mcp(
    ctx: typer.Context,
    template: str = typer.Option("base", "--template", "-t", help="Template for new sandboxes."),
) -> None:
    """Run an MCP server on stdio that gives an agent sandboxes (run_code, run_command, ...)."""
    from corral.mcp.server import run_stdio

    options = state(ctx)
    run_stdio(template=template, url=options.url, api_key=options.api_key)
