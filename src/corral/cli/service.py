"""`corral service add|ls|rm` (admin): the project's services, names that every sandbox in a
project mode resolves (docs/network.md)."""

from __future__ import annotations

import typer

from corral.cli._state import client, print_json

__all__ = ["app"]

app = typer.Typer(
    help="The project's services: names sandboxes in the project modes resolve and reach.",
    no_args_is_help=True,
)


@app.command("add")
def add(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME", help="The name sandboxes resolve."),
    target: str = typer.Argument(..., metavar="HOST:PORT", help="IPv4 address and port."),
) -> None:
    """Add (or replace) a service; running sandboxes get it at once."""
    added = client(ctx).add_service(name, target)
    typer.echo(f"{added.name} -> {added.address}:{','.join(map(str, added.ports))}")


@app.command("ls")
def list_services(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """List the project's services."""
    found = client(ctx).services()
    if as_json:
        print_json([item.to_dict() for item in found])
        return
    for item in found:
        typer.echo(f"{item.name}  {item.address}:{','.join(map(str, item.ports))}")


@app.command("rm")
def remove(ctx: typer.Context, name: str = typer.Argument(..., metavar="NAME")) -> None:
    """Remove a service; running sandboxes stop resolving and reaching it at once."""
    client(ctx).remove_service(name)
    typer.echo(f"removed {name}")
