"""`corral port open|ls|close`: a sandbox's ports reachable through the daemon (docs/network.md)."""

from __future__ import annotations

import typer

from corral.cli._state import client, print_json
from corral.sdk.models import PortInfo

__all__ = ["app"]

app = typer.Typer(
    help="Inbound ports: HTTP and WebSocket servers in a sandbox, reached through the daemon.",
    no_args_is_help=True,
)


def _line(item: PortInfo) -> str:
    access = "public" if item.public else f"token {item.token}"
    return f"{item.port}  {item.url}  {access}"


@app.command("open")
def open_port(
    ctx: typer.Context,
    sandbox_id: str = typer.Argument(..., metavar="ID"),
    port: int = typer.Argument(..., metavar="PORT", help="The port a server listens on."),
    public: bool = typer.Option(False, "--public", help="Reachable without the token."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON object (url, token)."),
) -> None:
    """Make a server on 0.0.0.0:PORT in the sandbox reachable by URL (send the token as the
    X-Corral-Token header or the corral_token query parameter, unless --public)."""
    opened = client(ctx).sandbox(sandbox_id).ports.open(port, public=public)
    if as_json:
        print_json(opened.to_dict())
        return
    typer.echo(f"url    {opened.url}")
    if opened.host_url and opened.host_url != opened.url:
        typer.echo(f"host   {opened.host_url}")
    if opened.path_url != opened.url:
        typer.echo(f"path   {opened.path_url}")
    typer.echo(f"token  {opened.token}" if opened.token else "public (no token)")


@app.command("ls")
def list_ports(
    ctx: typer.Context,
    sandbox_id: str = typer.Argument(..., metavar="ID"),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """List a sandbox's open ports."""
    found = client(ctx).sandbox(sandbox_id).ports.list()
    if as_json:
        print_json([item.to_dict() for item in found])
        return
    for item in found:
        typer.echo(_line(item))


@app.command("close")
def close_port(
    ctx: typer.Context,
    sandbox_id: str = typer.Argument(..., metavar="ID"),
    port: int = typer.Argument(..., metavar="PORT"),
) -> None:
    """Close a port: its URL stops answering and its open connections are cut."""
    client(ctx).sandbox(sandbox_id).ports.close(port)
    typer.echo(f"closed port {port} of {sandbox_id}")
