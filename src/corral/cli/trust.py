"""`corral trust ...`: whose signed exports `corral import` restores with their memory."""

from __future__ import annotations

from pathlib import Path

import typer

from corral.cli._state import client, print_json

__all__ = ["app"]

app = typer.Typer(
    help="Trusted signers of exports. `corral import` restores memory images only from this "
    "workspace or a key added here; give another host the key from `corral trust show`.",
    no_args_is_help=True,
)


@app.command("show")
def show(ctx: typer.Context) -> None:
    """Print this workspace's public key (for `corral trust add` on another host)."""
    typer.echo(client(ctx).workspace_public_key())


@app.command("add")
def add(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME", help="A name for the signer."),
    key: str = typer.Argument(
        ...,
        metavar="PUBKEY|FILE",
        help="ed25519:<base64> as `corral trust show` prints it, or a file holding it (or PEM).",
    ),
) -> None:
    """Trust exports signed by KEY (their memory images are then restored)."""
    path = Path(key)
    if not key.startswith("ed25519:") and path.is_file():
        key = path.read_text(errors="replace")[:8192]
    added = client(ctx).trust_key(name, key)
    typer.echo(f"trusting {added.name} {added.public_key}")


@app.command("ls")
def list_keys(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """List trusted signers (this workspace's own key is always trusted)."""
    found = client(ctx).trusted_keys()
    if as_json:
        print_json([key.to_dict() for key in found])
        return
    for key in found:
        typer.echo(f"{key.name}\t{key.public_key}")


@app.command("rm")
def remove(
    ctx: typer.Context,
    names: list[str] = typer.Argument(..., metavar="NAME..."),
) -> None:
    """Stop trusting signers (what was imported from them stays)."""
    sdk = client(ctx)
    for name in names:
        sdk.untrust_key(name)
