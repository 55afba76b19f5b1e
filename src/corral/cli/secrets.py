"""`corral secret set|ls|rm|rotate|log|revoke` (admin): brokered secrets (docs/secrets.md).

A value is read from stdin, or prompted for (not echoed) on a terminal; never from the command
line, where other users of the host could read it in the process list."""

from __future__ import annotations

import datetime
import getpass
import sys

import typer

from corral.cli._state import client, print_json

__all__ = ["app"]

app = typer.Typer(
    help="Brokered secrets: sandboxes hold placeholders, the broker adds the values on the way "
    "out to the secrets' hosts.",
    no_args_is_help=True,
)
MAX_VALUE = 8192


def _read_value(name: str) -> str:
    if sys.stdin.isatty():
        value = getpass.getpass(f"value of {name}: ")
    else:
        value = sys.stdin.read(MAX_VALUE + 2)
    value = value.rstrip("\r\n")  # a trailing newline from echo or a file is not part of it
    if not value:
        raise typer.BadParameter("empty value (give it on stdin or at the prompt)")
    return value


def _when(at: float | None) -> str:
    if not at:
        return "never"
    return datetime.datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")


@app.command("set")
def set_secret(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME", help="Also the sandbox's env var name."),
    preset: str = typer.Option(
        "http", "--preset", help="github, openai, anthropic, http (needs --host) or aws."
    ),
    host: list[str] = typer.Option(
        [], "--host", metavar="NAME", help="A host (or *.domain) it is for; repeatable."
    ),
    header: str | None = typer.Option(None, "--header", help="Only this header carries it."),
    scheme: str | None = typer.Option(None, "--scheme", help="With --header: e.g. Bearer."),
    query: bool | None = typer.Option(
        None, "--query/--no-query", help="Replace it in query strings."
    ),
    body: bool | None = typer.Option(None, "--body/--no-body", help="Replace it in bodies."),
) -> None:
    """Store (or replace) a secret; its value comes from stdin or a prompt."""
    value = _read_value(name)
    stored = client(ctx).set_secret(
        name,
        value,
        preset=preset,
        hosts=host or None,
        header=header,
        scheme=scheme,
        query=query,
        body=body,
    )
    typer.echo(f"{stored.name} ({stored.preset}) -> {', '.join(stored.hosts)}")


@app.command("rotate")
def rotate(ctx: typer.Context, name: str = typer.Argument(..., metavar="NAME")) -> None:
    """A new value (stdin or prompt); running sandboxes use it from their next request."""
    value = _read_value(name)
    client(ctx).rotate_secret(name, value)
    typer.echo(f"rotated {name}")


@app.command("ls")
def list_secrets(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """Names, presets, hosts, bound sandboxes and last use; never values."""
    found = client(ctx).secrets()
    if as_json:
        print_json([item.to_dict() for item in found])
        return
    for item in found:
        typer.echo(
            f"{item.name}  {item.preset}  {','.join(item.hosts)}  "
            f"sandboxes={len(item.sandboxes)}  last used {_when(item.last_used_at)}"
        )


@app.command("rm")
def remove(ctx: typer.Context, name: str = typer.Argument(..., metavar="NAME")) -> None:
    """Delete a secret; every sandbox stops getting it at once."""
    client(ctx).remove_secret(name)
    typer.echo(f"removed {name}")


@app.command("revoke")
def revoke(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME"),
    sandbox: str = typer.Option(..., "--sandbox", metavar="ID", help="The sandbox."),
) -> None:
    """Stop giving a secret to one sandbox, at once."""
    client(ctx).revoke_secret(sandbox, name)
    typer.echo(f"revoked {name} for {sandbox}")


@app.command("log")
def log(
    ctx: typer.Context,
    name: str | None = typer.Argument(None, metavar="[NAME]"),
    sandbox: str | None = typer.Option(None, "--sandbox", metavar="ID"),
    limit: int = typer.Option(100, "--limit", min=1, max=10_000),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """Every injection: time, sandbox, secret, host, method, path (never values or queries)."""
    entries = client(ctx).secret_log(name, sandbox, limit)
    if as_json:
        print_json([entry.to_dict() for entry in entries])
        return
    for e in entries:
        typer.echo(f"{_when(e.at)}  {e.sandbox_id}  {e.secret}  {e.method} {e.host}{e.path}")
