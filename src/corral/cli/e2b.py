"""`corral e2b env`: the settings that point the official E2B SDK at this daemon."""

from __future__ import annotations

import shlex

import typer

from corral.cli._state import client, state
from corral.sdk.config import resolve_api_key

__all__ = ["app"]

app = typer.Typer(help="The E2B-compatible front of this daemon.", no_args_is_help=True)


@app.command("env")
def env(ctx: typer.Context) -> None:
    """Print `export` lines for E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY.

    Use as `eval "$(corral e2b env)"`; unchanged code using the `e2b` package then runs here.
    """
    found = client(ctx)
    found.capacity()  # the daemon answers and takes the key, or this fails with why
    key = resolve_api_key(state(ctx).api_key)
    settings = {
        "E2B_API_URL": found.url,
        "E2B_SANDBOX_URL": found.url,
        "E2B_API_KEY": key,
    }
    for name, value in settings.items():
        typer.echo(f"export {name}={shlex.quote(value)}")
