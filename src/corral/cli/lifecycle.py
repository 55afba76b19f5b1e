"""`corral park`, `wake`, `fork`: moving a running sandbox's state around."""

from __future__ import annotations

import typer

from corral.cli._state import client, print_json

__all__ = ["fork", "park", "wake"]


def park(ctx: typer.Context, sandbox_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Checkpoint a sandbox to disk and free its CPU and memory."""
    details = client(ctx).sandbox(sandbox_id).park()
    typer.echo(f"{details.id} {details.state}")


def wake(ctx: typer.Context, sandbox_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Restore a parked sandbox, processes and all (waking a running one is not an error)."""
    details = client(ctx).sandbox(sandbox_id).wake()
    typer.echo(f"{details.id} {details.state}")


def fork(
    ctx: typer.Context,
    sandbox_id: str = typer.Argument(..., metavar="ID"),
    count: int = typer.Option(1, "--count", "-n", min=1, help="How many copies."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of the new sandboxes."),
) -> None:
    """Make COUNT sandboxes that continue from this one's current state; it keeps running."""
    children = client(ctx).sandbox(sandbox_id).fork(count)
    if as_json:
        print_json([child.last_info.to_dict() for child in children])
    else:
        for child in children:
            typer.echo(child.id)
