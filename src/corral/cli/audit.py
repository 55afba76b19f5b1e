"""`corral audit` and `corral events`: the workspace's record of calls, and its live changes."""

from __future__ import annotations

import json
import time

import typer

from corral.cli._state import client, parse_duration

__all__ = ["audit", "events"]


def audit(
    ctx: typer.Context,
    key: str | None = typer.Option(None, "--key", help="Only calls made with this key (name)."),
    sandbox: str | None = typer.Option(None, "--sandbox", help="Only calls on this sandbox."),
    since: str | None = typer.Option(None, "--since", help="Only the last 1h, 30m, 7d, ..."),
    limit: int = typer.Option(1000, "--limit", min=1, max=5000),
    as_json: bool = typer.Option(False, "--json", help="JSON lines (an export)."),
) -> None:
    """The audit log (admin): every mutating call and every refused one, oldest first."""
    start = time.time() - parse_duration(since, "--since") if since else None
    entries = client(ctx).audit(key=key, sandbox=sandbox, since=start, limit=limit)
    for entry in entries:
        if as_json:
            typer.echo(json.dumps(entry.to_dict(), sort_keys=True))
            continue
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.at))
        typer.echo(
            f"{when}\t{entry.key_name or '-'}\t{entry.action}\t{entry.target or '-'}\t"
            f"{entry.status} {entry.result}\t{entry.source or '-'}"
        )


def events(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="JSON lines."),
) -> None:
    """Follow state changes (created, running, parked, woken, forked, killed, ...) as they
    happen, those this key may see; Ctrl-C stops."""
    for event in client(ctx).events():
        if as_json:
            typer.echo(json.dumps(event.to_dict(), sort_keys=True))
            continue
        when = time.strftime("%H:%M:%S", time.localtime(event.at))
        what = event.sandbox_id or event.template or ""
        extra = f" {json.dumps(event.detail)}" if event.detail else ""
        typer.echo(f"{when}\t{event.kind}\t{what}{extra}")
