"""`corral capacity` and `corral template ...`: the workspace's resources and templates."""

from __future__ import annotations

import typer

from corral.cli._state import client, print_json
from corral.cli.render import number, print_capacity, print_templates

__all__ = ["capacity", "templates_app"]


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


templates_app = typer.Typer(help="Manage templates.", no_args_is_help=True)


@templates_app.command("ls")
def list_templates(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """List templates."""
    found = client(ctx).templates()
    if as_json:
        print_json([tpl.to_dict() for tpl in found])
    else:
        print_templates(found)


@templates_app.command("create")
def create_template(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME"),
    image: str | None = typer.Option(None, "--from", help="Image to build from."),
    warmup: str | None = typer.Option(None, "--warmup", help="Command run once after start."),
    warm: bool = typer.Option(False, "--warm", help="Keep a memory checkpoint after warmup."),
    cpu: float | None = typer.Option(None, "--cpu", help="Default vCPUs."),
    memory: int | None = typer.Option(None, "--memory", help="Default memory in MiB."),
    as_json: bool = typer.Option(False, "--json", help="Print the template as JSON."),
) -> None:
    """Create a template."""
    made = client(ctx).create_template(
        name, image=image, warmup=warmup, warm=warm, cpu=cpu, memory_mib=memory
    )
    if as_json:
        print_json(made.to_dict())
    else:
        typer.echo(made.name)
