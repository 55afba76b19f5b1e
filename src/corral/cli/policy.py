"""`corral policy show|set`: the workspace policy (set: an admin key's verb)."""

from __future__ import annotations

import json
from typing import Any

import typer

from corral.cli._state import client, print_json

__all__ = ["app"]

app = typer.Typer(
    help="The workspace policy: per-sandbox ceilings, TTL cap and default, network modes, "
    "egress rule shapes for members, templates, runtimes, forks per call.",
    no_args_is_help=True,
)

LISTS = {"network_modes", "member_rule_kinds", "templates", "runtimes"}


@app.command("show")
def show(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON object."),
) -> None:
    """Print the policy in force."""
    policy = client(ctx).policy.get()
    if as_json:
        print_json(policy.to_dict())
        return
    for name, value in policy.to_dict().items():
        shown = ",".join(value) if isinstance(value, list) else value
        typer.echo(f"{name}\t{'-' if shown is None else shown}")


def _value(name: str, text: str) -> Any:
    if text.lower() in ("default", "none", "null"):
        return None
    if name in LISTS:
        return [item.strip() for item in text.split(",") if item.strip()]
    try:
        return json.loads(text)
    except ValueError:
        raise typer.BadParameter(
            f"{name}: {text!r} is not a number", param_hint="FIELD=VALUE"
        ) from None


@app.command("set")
def set_policy(
    ctx: typer.Context,
    changes: list[str] = typer.Argument(
        ...,
        metavar="FIELD=VALUE...",
        help="e.g. max_cpu=2 network_modes=airgapped,project member_min_prefix=8 "
        "templates='base,py-*' max_forks=4; VALUE `default` resets a field.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the new policy as JSON."),
) -> None:
    """Change policy fields; they apply to the next request at once."""
    parsed: dict[str, Any] = {}
    for change in changes:
        name, sep, text = change.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"expected FIELD=VALUE, got {change!r}")
        parsed[name.strip()] = _value(name.strip(), text)
    policy = client(ctx).policy.set(**parsed)
    if as_json:
        print_json(policy.to_dict())
        return
    typer.echo("policy updated")
