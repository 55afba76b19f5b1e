"""`corral capacity`: the workspace's resources; `corral console`: a web console login link."""

from __future__ import annotations

import typer

from corral.cli._state import client, print_json
from corral.cli.render import number, print_capacity

__all__ = ["capacity", "console"]


def capacity(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Total, reserved and free cpu (vCPUs), memory and disk (MiB)."""
    found = client(ctx).capacity()
    if as_json:
        print_json(
            {
                name: {
                    "total": number(usage.total),
                    "reserved": number(usage.reserved),
                    "free": number(usage.free),
                }
                for name, usage in (
                    ("cpu", found.cpu),
                    ("memory", found.memory),
                    ("disk", found.disk),
                )
            }
            | {"cpu_overcommit": found.cpu_overcommit}
        )
    else:
        print_capacity(found)


def console(ctx: typer.Context) -> None:
    """Print a link that logs a browser into the web console once (valid for two minutes),
    acting as this CLI's API key. Or open URL/console/ and paste an API key."""
    link = client(ctx).console_login_link()
    typer.echo(link)
