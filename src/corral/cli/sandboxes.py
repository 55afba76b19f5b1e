"""`corral new`, `ls`, `info`, `kill`: sandboxes as a whole."""

from __future__ import annotations

import enum

import typer

from corral.cli._state import client, parse_pairs, print_json
from corral.cli.render import print_sandbox, print_sandboxes

__all__ = ["info", "kill", "list_sandboxes", "new"]


class OnTimeout(enum.StrEnum):
    kill = "kill"
    park = "park"


def new(
    ctx: typer.Context,
    template: str = typer.Option("base", "--template", "-t", help="Template to start from."),
    cpu: float | None = typer.Option(None, "--cpu", help="vCPUs."),
    memory: int | None = typer.Option(None, "--memory", help="Memory in MiB."),
    disk: int | None = typer.Option(None, "--disk", help="Disk in MiB."),
    env: list[str] = typer.Option([], "--env", help="K=V, repeatable."),
    metadata: list[str] = typer.Option([], "--metadata", help="K=V, repeatable."),
    ttl: int | None = typer.Option(
        None, "--ttl", help="End after this many seconds (see --on-timeout)."
    ),
    snapshot: str | None = typer.Option(None, "--snapshot", help="Restore from this snapshot."),
    secret_env: list[str] = typer.Option(
        [],
        "--secret-env",
        help="K=V never stored or shown; the sandbox then refuses fork, export and memory "
        "snapshots. Repeatable.",
    ),
    on_timeout: OnTimeout = typer.Option(
        OnTimeout.kill, "--on-timeout", help="What the end of --ttl does."
    ),
    auto_park_idle: int | None = typer.Option(
        None, "--auto-park-idle", min=1, help="Park after this many seconds without use."
    ),
    auto_wake: bool = typer.Option(
        False, "--auto-wake", help="Wake a parked sandbox on exec or file calls."
    ),
    network: str | None = typer.Option(
        None,
        "--network",
        help="project_internet (the default), internet, project or airgapped.",
    ),
    allow: list[str] = typer.Option([], "--allow", metavar="RULE", help="Egress allow rule."),
    deny: list[str] = typer.Option([], "--deny", metavar="RULE", help="Egress deny rule."),
    secret: list[str] = typer.Option(
        [],
        "--secret",
        metavar="NAME",
        help="A brokered secret (corral secret set): the env var NAME holds a placeholder that "
        "the broker swaps for the value on requests to the secret's hosts. Repeatable.",
    ),
    secret_file: list[str] = typer.Option(
        [],
        "--secret-file",
        metavar="NAME:PATH[:TEMPLATE]",
        help="Write PATH in the sandbox with NAME's placeholder: the preset's format, or the "
        "local TEMPLATE file's text with $NAME replaced. Repeatable.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the sandbox as JSON."),
) -> None:
    """Create a sandbox (or restore one from --snapshot) and print its id."""
    files = [_secret_file(spec) for spec in secret_file]
    sandbox = client(ctx).create_sandbox(
        template,
        cpu=cpu,
        memory_mib=memory,
        disk_mib=disk,
        env=parse_pairs(env, "--env"),
        metadata=parse_pairs(metadata, "--metadata"),
        ttl_seconds=ttl,
        snapshot=snapshot,
        secret_env=parse_pairs(secret_env, "--secret-env"),
        on_timeout=None if on_timeout is OnTimeout.kill else on_timeout.value,
        auto_park_idle=auto_park_idle,
        auto_wake=auto_wake,
        network=network,
        allow=allow,
        deny=deny,
        secrets=list(dict.fromkeys([*secret, *(str(f["name"]) for f in files)])),
        secret_files=files,
    )
    if as_json:
        print_json(sandbox.last_info.to_dict())
    else:
        typer.echo(sandbox.id)


def _secret_file(spec: str) -> dict[str, str | None]:
    """``NAME:PATH[:TEMPLATE]`` -> the API's secret file (the template read from this host)."""
    name, sep, rest = spec.partition(":")
    path, _, template_file = rest.partition(":")
    if not sep or not name or not path.startswith("/"):
        raise typer.BadParameter(
            f"{spec!r} is not NAME:/PATH[:TEMPLATE_FILE]", param_hint="--secret-file"
        )
    template = None
    if template_file:
        with open(template_file, encoding="utf-8") as source:
            template = source.read(65537)
    return {"name": name, "path": path, "template": template}


def list_sandboxes(
    ctx: typer.Context,
    state: str | None = typer.Option(None, "--state", help="Only sandboxes in this state."),
    metadata: list[str] = typer.Option([], "--metadata", help="K=V filter, repeatable."),
    show_all: bool = typer.Option(
        False, "--all", "-a", help="Also the ended (killed, stopped) sandboxes."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """List live sandboxes (`--all`: also the ended ones still on record)."""
    found = client(ctx).list_sandboxes(state, parse_pairs(metadata, "--metadata"), all=show_all)
    if as_json:
        print_json([sbx.to_dict() for sbx in found])
    else:
        print_sandboxes(found)


def info(
    ctx: typer.Context,
    sandbox_id: str = typer.Argument(..., metavar="ID"),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Show one sandbox."""
    details = client(ctx).sandbox(sandbox_id).info()
    if as_json:
        print_json(details.to_dict())
    else:
        print_sandbox(details)


def kill(ctx: typer.Context, sandbox_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Kill a sandbox (killing one that is already gone is not an error)."""
    client(ctx).sandbox(sandbox_id).kill()
