"""`corral files ...`: a sandbox's filesystem from the command line; data streams via stdio."""

from __future__ import annotations

import typer

from corral.cli._state import client, print_json
from corral.cli.render import print_files

__all__ = ["app"]

app = typer.Typer(help="Read, write and manage files in a sandbox.", no_args_is_help=True)

_ID = typer.Argument(..., metavar="ID")
_PATH = typer.Argument(..., metavar="PATH", help="Path inside the sandbox.")


@app.command("write")
def write(
    ctx: typer.Context,
    sandbox_id: str = _ID,
    path: str = _PATH,
    mode: str | None = typer.Option(None, "--mode", help="Permission bits in octal, e.g. 755."),
) -> None:
    """Write stdin to PATH (streamed; parent directories are created)."""
    bits = int(mode, 8) if mode is not None else None
    client(ctx).sandbox(sandbox_id).files.write(path, typer.get_binary_stream("stdin"), mode=bits)


@app.command("read")
def read(ctx: typer.Context, sandbox_id: str = _ID, path: str = _PATH) -> None:
    """Copy PATH to stdout (streamed, raw bytes)."""
    out = typer.get_binary_stream("stdout")
    for chunk in client(ctx).sandbox(sandbox_id).files.stream(path):
        out.write(chunk)
    out.flush()


@app.command("ls")
def list_files(
    ctx: typer.Context,
    sandbox_id: str = _ID,
    path: str = typer.Argument("/", metavar="PATH"),
    depth: int = typer.Option(1, "--depth", min=1, help="How many levels to descend."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """List a directory."""
    entries = client(ctx).sandbox(sandbox_id).files.list(path, depth)
    if as_json:
        print_json([entry.to_dict() for entry in entries])
    else:
        print_files(entries)


@app.command("stat")
def stat(
    ctx: typer.Context,
    sandbox_id: str = _ID,
    path: str = _PATH,
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Show one file's type, size, mode and mtime."""
    entry = client(ctx).sandbox(sandbox_id).files.stat(path)
    if as_json:
        print_json(entry.to_dict())
    else:
        print_files([entry])


@app.command("mkdir")
def mkdir(ctx: typer.Context, sandbox_id: str = _ID, path: str = _PATH) -> None:
    """Make a directory (and its parents)."""
    client(ctx).sandbox(sandbox_id).files.mkdir(path)


@app.command("mv")
def move(
    ctx: typer.Context,
    sandbox_id: str = _ID,
    src: str = typer.Argument(..., metavar="SRC"),
    dst: str = typer.Argument(..., metavar="DST"),
) -> None:
    """Move or rename SRC to DST."""
    client(ctx).sandbox(sandbox_id).files.move(src, dst)


@app.command("rm")
def remove(
    ctx: typer.Context,
    sandbox_id: str = _ID,
    path: str = _PATH,
    recursive: bool = typer.Option(False, "--recursive", "-r", help="Remove a directory tree."),
) -> None:
    """Remove a file (or, with -r, a directory tree)."""
    client(ctx).sandbox(sandbox_id).files.remove(path, recursive)
