"""`corral export` and `corral import`: a parked sandbox or a snapshot as one signed file."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from corral.cli._state import client, print_json

__all__ = ["export", "import_file"]

SNAPSHOT_PREFIX = "snapshot:"


def export(
    ctx: typer.Context,
    target: str = typer.Argument(
        ..., metavar="ID|snapshot:NAME", help="A parked sandbox, or snapshot:NAME."
    ),
    file: str | None = typer.Argument(None, metavar="FILE", help="Where to write; - for stdout."),
    snapshot: str | None = typer.Option(
        None, "--snapshot", help="Export this snapshot (then the only argument is FILE)."
    ),
) -> None:
    """Write a parked sandbox or a snapshot to FILE, for `corral import` on any corral host."""
    if snapshot is not None:
        if file is not None:
            raise typer.BadParameter("with --snapshot NAME give only FILE", param_hint="FILE")
        target, file = SNAPSHOT_PREFIX + snapshot, target
    if file is None:
        raise typer.BadParameter("missing FILE (use - for stdout)", param_hint="FILE")
    sdk = client(ctx)
    destination = sys.stdout.buffer if file == "-" else Path(file)
    if target.startswith(SNAPSHOT_PREFIX):
        what = f"snapshot {target[len(SNAPSHOT_PREFIX) :]}"
        size = sdk.export_snapshot(target[len(SNAPSHOT_PREFIX) :], destination)
    else:
        what = f"sandbox {target}"
        size = sdk.export_sandbox(target, destination)
    if file != "-":
        typer.echo(f"exported {what} to {file} ({size / (1024 * 1024):.1f} MiB)")


def import_file(
    ctx: typer.Context,
    file: str = typer.Argument(..., metavar="FILE", help="A file made by `corral export`."),
    fs_only: bool = typer.Option(
        False,
        "--fs-only",
        help="Import an export whose signer is not trusted, files only: its memory is never "
        "restored (an fs snapshot comes in whole; a parked sandbox or memory snapshot, whose "
        "files are inside its memory image, is refused).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print what was imported as JSON."),
) -> None:
    """Bring in an exported sandbox (it arrives parked: `corral wake ID`) or snapshot.

    Memory images are restored only from a trusted signer: this workspace or one added with
    `corral trust add`."""
    source = sys.stdin.buffer if file == "-" else Path(file)
    result = client(ctx).import_file(source, fs_only=fs_only)
    if as_json:
        print_json(result.to_dict())
    elif result.sandbox is not None:
        typer.echo(f"{result.sandbox.id} {result.sandbox.state}")
    elif result.snapshot is not None:
        typer.echo(f"snapshot {result.snapshot.name}")
