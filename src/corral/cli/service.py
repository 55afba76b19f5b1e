"""`corral service add|ls|rm` (admin): the project's services, names that every sandbox in a
project mode resolves (docs/network.md)."""

from __future__ import annotations

import typer

from corral.cli._state import client, print_json
from corral.sdk.models import ProjectServiceInfo

__all__ = ["app"]

app = typer.Typer(
    help="The project's services: names sandboxes in the project modes resolve and reach.",
    no_args_is_help=True,
)


@app.command("add")
def add(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME", help="The name sandboxes resolve."),
    target: str | None = typer.Argument(None, metavar="[HOST:PORT]", help="IPv4 address, port."),
    sandbox: str | None = typer.Option(
        None, "--sandbox", metavar="ID", help="The service is a port of this sandbox."
    ),
    port: int | None = typer.Option(None, "--port", help="With --sandbox: its port."),
) -> None:
    """Add (or replace) a service, HOST:PORT or --sandbox ID --port N; running sandboxes get
    it at once."""
    if (target is None) == (sandbox is None) or (sandbox is None) != (port is None):
        raise typer.BadParameter("give HOST:PORT, or --sandbox ID and --port N")
    added = client(ctx).services.add(name, target, sandbox=sandbox, port=port)
    typer.echo(_describe(added))


def _describe(item: ProjectServiceInfo) -> str:
    ports = ",".join(map(str, item.ports))
    if item.sandbox_id:
        return f"{item.name} -> sandbox {item.sandbox_id} port {ports} (at {item.address})"
    return f"{item.name} -> {item.address}:{ports}"


@app.command("ls")
def list_services(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """List the project's services."""
    found = client(ctx).services.list()
    if as_json:
        print_json([item.to_dict() for item in found])
        return
    for item in found:
        typer.echo(_describe(item))


@app.command("rm")
def remove(ctx: typer.Context, name: str = typer.Argument(..., metavar="NAME")) -> None:
    """Remove a service; running sandboxes stop resolving and reaching it at once."""
    client(ctx).services.remove(name)
    typer.echo(f"removed {name}")
