"""`corral new`, `ls`, `info`, `kill`: sandboxes as a whole."""

from __future__ import annotations

import typer

from corral.cli._state import client, parse_pairs, print_json
from corral.cli.render import print_sandbox, print_sandboxes

__all__ = ["info", "kill", "list_sandboxes", "new"]


def new(
    ctx: typer.Context,
    template: str = typer.Option("base", "--template", "-t", help="Template to start from."),
    cpu: float | None = typer.Option(None, "--cpu", help="vCPUs."),
    memory: int | None = typer.Option(None, "--memory", help="Memory in MiB."),
    disk: int | None = typer.Option(None, "--disk", help="Disk in MiB."),
    env: list[str] = typer.Option([], "--env", help="K=V, repeatable."),
    metadata: list[str] = typer.Option([], "--metadata", help="K=V, repeatable."),
    ttl: int | None = typer.Option(None, "--ttl", help="Kill after this many seconds."),
    snapshot: str | None = typer.Option(None, "--snapshot", help="Restore from this snapshot."),
    as_json: bool = typer.Option(False, "--json", help="Print the sandbox as JSON."),
) -> None:
    """Create a sandbox and print its id."""
    sandbox = client(ctx).create_sandbox(
        template,
        cpu=cpu,
        memory_mib=memory,
        disk_mib=disk,
        env=parse_pairs(env, "--env"),
        metadata=parse_pairs(metadata, "--metadata"),
        ttl_seconds=ttl,
        snapshot=snapshot,
    )
    if as_json:
        print_json(sandbox.last_info.to_dict())
    else:
        typer.echo(sandbox.id)


def list_sandboxes(
    ctx: typer.Context,
    state: str | None = typer.Option(None, "--state", help="Only sandboxes in this state."),
    metadata: list[str] = typer.Option([], "--metadata", help="K=V filter, repeatable."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """List sandboxes."""
    found = client(ctx).list_sandboxes(state, parse_pairs(metadata, "--metadata"))
    if as_json:
        print_json([sbx.to_dict() for sbx in found])
    else:
        print_sandboxes(found)


def info(
    ctx: typer.Context,
    sandbox_id: str = typer.Argument(..., metavar="ID"),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Show one sandbox."""
    details = client(ctx).sandbox(sandbox_id).info()
    if as_json:
        print_json(details.to_dict())
    else:
        print_sandbox(details)


def kill(ctx: typer.Context, sandbox_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Kill a sandbox (killing one that is already gone is not an error)."""
    client(ctx).sandbox(sandbox_id).kill()
