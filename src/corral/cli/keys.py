"""`corral key ...`: API keys with roles, scopes, expiry and quotas (an admin key's verbs)."""

from __future__ import annotations

import time

import typer

from corral.cli._state import client, parse_duration, parse_pairs, print_json

__all__ = ["app"]

app = typer.Typer(
    help="API keys: admin (everything), member (its own sandboxes, snapshots, templates), "
    "viewer (reads). A new key is printed once; the daemon keeps only its hash.",
    no_args_is_help=True,
)


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


@app.command("create")
def create(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME"),
    role: str = typer.Option("member", "--role", help="admin, member or viewer."),
    scope: str | None = typer.Option(
        None,
        "--scope",
        help="Comma-separated families of calls it may make: sandboxes, templates, snapshots, "
        "workspace, events, keys, audit, metrics, services, trust (default: all its role has).",
    ),
    expires: str | None = typer.Option(None, "--expires", help="Lifetime, e.g. 12h, 30d."),
    quota: list[str] | None = typer.Option(
        None,
        "--quota",
        help="NAME=LIMIT, repeatable: running, cpu, memory_mib, disk_mib, parked.",
    ),
    rate_limit: float | None = typer.Option(
        None, "--rate-limit", help="Requests per second (default: the workspace's)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON object (with `key`)."),
) -> None:
    """Create a key and print it (this is the only time it is shown)."""
    quotas = {}
    for name_, value in parse_pairs(quota, "--quota").items():
        try:
            quotas[name_] = float(value)
        except ValueError:
            raise typer.BadParameter(f"{value!r} is not a number", param_hint="--quota") from None
    scopes = [s.strip() for s in scope.split(",") if s.strip()] if scope is not None else None
    created = client(ctx).keys.create(
        name,
        role=role,
        scopes=scopes,
        expires_in=parse_duration(expires, "--expires") if expires else None,
        quotas=quotas,
        rate_limit=rate_limit,
    )
    if as_json:
        print_json(created.to_dict())
        return
    typer.echo(created.key)
    typer.echo(
        f"created {created.name} ({created.role}); store the key now, it is not shown again",
        err=True,
    )


@app.command("ls")
def list_keys(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """List keys: name, role, scopes, created, last used, expiry, quotas (never the key)."""
    found = client(ctx).keys.list()
    if as_json:
        print_json([key.to_dict() for key in found])
        return
    typer.echo("NAME\tROLE\tSCOPES\tCREATED\tLAST USED\tEXPIRES\tQUOTAS")
    for key in found:
        scopes = ",".join(key.scopes) if key.scopes is not None else "all"
        quotas = ",".join(f"{k}={v:g}" for k, v in key.quotas.items()) or "-"
        typer.echo(
            f"{key.name}\t{key.role}\t{scopes}\t{_when(key.created_at)}\t"
            f"{_when(key.last_used_at)}\t{_when(key.expires_at)}\t{quotas}"
        )


@app.command("revoke")
def revoke(
    ctx: typer.Context,
    names: list[str] = typer.Argument(..., metavar="NAME..."),
) -> None:
    """Revoke keys: they are refused (401) at once."""
    sdk = client(ctx)
    for name in names:
        sdk.keys.revoke(name)
        typer.echo(f"revoked {name}")


@app.command("whoami")
def whoami(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON object."),
) -> None:
    """The key in use: its role, scopes, quotas and what its sandboxes hold."""
    me = client(ctx).keys.me()
    if as_json:
        print_json(me.to_dict())
        return
    typer.echo(f"{me.name} ({me.role}), scopes: {','.join(me.scopes or []) or 'all'}")
    for quota, used in (me.usage or {}).items():
        limit = me.quotas.get(quota)
        typer.echo(f"  {quota}: {used:g}" + (f" of {limit:g}" if limit is not None else ""))
