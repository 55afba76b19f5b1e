"""`corral network ID`: show or change a sandbox's egress policy (docs/network.md)."""

from __future__ import annotations

import typer

from corral.cli._state import client, print_json

__all__ = ["network"]


def network(
    ctx: typer.Context,
    sandbox_id: str = typer.Argument(..., metavar="ID"),
    mode: str | None = typer.Option(
        None, "--mode", help="project_internet, internet, project or airgapped."
    ),
    allow: list[str] = typer.Option(
        [], "--allow", metavar="RULE", help="Replaces the allow rules; repeatable."
    ),
    deny: list[str] = typer.Option(
        [], "--deny", metavar="RULE", help="Replaces the deny rules; repeatable."
    ),
    clear_allow: bool = typer.Option(False, "--clear-allow", help="Remove every allow rule."),
    clear_deny: bool = typer.Option(False, "--clear-deny", help="Remove every deny rule."),
    as_json: bool = typer.Option(False, "--json", help="Print the policy as JSON."),
) -> None:
    """Show a sandbox's network policy, or change it at once (RULE: CIDR[:PORT[-PORT]],
    project[:PORT], or a host name). Rules given replace the old ones of their kind; a deny
    wins over every allow. Connections the new policy forbids are cut."""
    sandbox = client(ctx).sandbox(sandbox_id)
    changing = mode is not None or allow or deny or clear_allow or clear_deny
    if changing:
        change = sandbox.network.update(
            mode,
            allow=[] if clear_allow else (allow or None),
            deny=[] if clear_deny else (deny or None),
        )
        policy, cut = change.network, change.connections_cut
    else:
        policy, cut = sandbox.network.get(), 0
    if as_json:
        print_json(policy.to_dict())
        return
    typer.echo(f"mode   {policy.mode}")
    typer.echo(f"allow  {' '.join(policy.allow) or '-'}")
    typer.echo(f"deny   {' '.join(policy.deny) or '-'}")
    if cut:
        typer.echo(f"cut    {cut} open connection(s)")
