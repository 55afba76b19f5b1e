"""`corral snapshot ...`: take (`corral snapshot ID NAME`), list and remove snapshots."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from corral.cli._state import client, print_json
from corral.cli.render import print_snapshots

__all__ = ["app"]


class _TakeByDefault(TyperGroup):
    """`corral snapshot ID NAME` means `corral snapshot take ID NAME`: anything that is not one
    of the group's verbs (or its --help) starts the arguments of `take`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["take", *args]
        result: list[str] = super().parse_args(ctx, args)
        return result


app = typer.Typer(
    cls=_TakeByDefault,
    help="Save sandbox states and restore them with `corral new --snapshot NAME`.\n\n"
    "`corral snapshot ID NAME` is short for `corral snapshot take ID NAME`.",
    no_args_is_help=True,
)


@app.command("take")
def take(
    ctx: typer.Context,
    sandbox_id: str = typer.Argument(..., metavar="ID"),
    name: str = typer.Argument(..., metavar="NAME"),
    fs_only: bool = typer.Option(
        False, "--fs-only", help="Files only: no memory, restored sandboxes start fresh."
    ),
    allow_secrets: bool = typer.Option(
        False,
        "--allow-secrets",
        help="Allow a files-only snapshot of a sandbox created with --secret-env.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the snapshot as JSON."),
) -> None:
    """Save sandbox ID's state (memory and files, or --fs-only) as NAME."""
    saved = (
        client(ctx).sandbox(sandbox_id).snapshot(name, fs_only=fs_only, allow_secrets=allow_secrets)
    )
    if as_json:
        print_json(saved.to_dict())
    else:
        typer.echo(saved.name)


@app.command("ls")
def list_snapshots(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """List snapshots."""
    found = client(ctx).snapshots()
    if as_json:
        print_json([saved.to_dict() for saved in found])
    else:
        print_snapshots(found)


@app.command("rm")
def remove(
    ctx: typer.Context,
    names: list[str] = typer.Argument(..., metavar="NAME..."),
) -> None:
    """Remove snapshots (sandboxes restored from them are not affected)."""
    sdk = client(ctx)
    for name in names:
        sdk.remove_snapshot(name)
