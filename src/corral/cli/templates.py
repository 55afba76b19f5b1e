"""`corral template create|ls|info|rm|logs`: build and manage templates."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from corral.cli._state import client, parse_pairs, print_json

if TYPE_CHECKING:
    from corral.sdk.templates import BuildEvent

__all__ = ["templates_app"]

templates_app = typer.Typer(help="Build and manage templates.", no_args_is_help=True)


def _show(event: BuildEvent) -> None:
    text = event.text
    if not text:
        return
    if event.type == "output" and event.raw.get("stream") == "stderr":
        sys.stderr.write(text)
        sys.stderr.flush()
    elif event.type != "failed":  # the failure is reported once, as `error:`
        sys.stdout.write(text)
        sys.stdout.flush()


@templates_app.command("create")
def create_template(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME", help="NAME or NAME:TAG"),
    source: str | None = typer.Option(
        None,
        "--from",
        help="A template, docker-archive:PATH, oci:PATH[:TAG] (local paths, uploaded) or "
        "registry:HOST/NAME:TAG.",
    ),
    run: list[str] = typer.Option([], "--run", help="Command to run (repeatable)."),
    env: list[str] = typer.Option([], "--env", help="K=V baked into the template (repeatable)."),
    workdir: str | None = typer.Option(None, "--workdir", help="Default working directory."),
    user: str | None = typer.Option(None, "--user", help="Default user."),
    copy: list[str] = typer.Option(
        [], "--copy", help="SRC:DST local file or dir, uploaded (repeatable)."
    ),
    dockerfile: Path | None = typer.Option(
        None, "--dockerfile", help="Build this Dockerfile (its dir is the uploaded context)."
    ),
    build_arg: list[str] = typer.Option([], "--build-arg", help="ARG value K=V (repeatable)."),
    start: str | None = typer.Option(None, "--start", help="Start command of every sandbox."),
    recipes: list[str] = typer.Option(
        [],
        "--with",
        metavar="RECIPE",
        help="Start from a recipe (repeatable): dev (git, node, claude, codex), "
        "code-interpreter (`corral template recipes`).",
    ),
    creds: str | None = typer.Option(None, "--creds", help="Registry USER:PASS."),
    insecure: bool = typer.Option(
        False,
        "--insecure",
        help="Allow a plain-HTTP or unverified-TLS registry (loopback ones too).",
    ),
    tag: list[str] = typer.Option([], "--tag", help="Also tag the result (repeatable)."),
    cpu: float | None = typer.Option(None, "--cpu", help="Default vCPUs."),
    memory: int | None = typer.Option(None, "--memory", help="Default memory in MiB."),
    disk: int | None = typer.Option(None, "--disk", help="Default disk in MiB."),
    max_cpu: float | None = typer.Option(None, "--max-cpu", help="Ceiling of vCPUs."),
    max_memory: int | None = typer.Option(None, "--max-memory", help="Ceiling of MiB."),
    max_disk: int | None = typer.Option(None, "--max-disk", help="Ceiling of disk MiB."),
    warmup: str | None = typer.Option(None, "--warmup", help="Command run once after start."),
    warm: bool = typer.Option(False, "--warm", help="Keep a memory checkpoint after warmup."),
    pool: int = typer.Option(0, "--pool", help="Ready sandboxes to keep."),
    step_timeout: float | None = typer.Option(
        None, "--step-timeout", help="Seconds a build step may take (default: the daemon's)."
    ),
    build_disk: int | None = typer.Option(
        None, "--build-disk", help="Disk of the build sandbox in MiB (default: the daemon's)."
    ),
    network: str | None = typer.Option(
        None, "--network", help="What RUN steps reach: internet (the default), airgapped, ..."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the result."),
    as_json: bool = typer.Option(False, "--json", help="Print the template as JSON."),
) -> None:
    """Build a template, showing the build's progress and output as it goes.

    Steps run in this order: each --with recipe's steps (the daemon adds them), a
    --dockerfile's steps, then --copy, --env, --workdir, --run (in the order given, as root),
    then --user (the default user of the template's sandboxes). Local paths (the Dockerfile's
    dir, --copy sources, --from docker-archive:PATH / oci:PATH) are packed and uploaded: the
    daemon reads none of its own."""
    from corral.sdk.templates import Template

    spec = Template()
    if dockerfile is not None:
        spec.from_dockerfile(dockerfile)
    if source is not None:
        spec.from_image(source)
    if start is not None:
        spec.set_start_cmd(start)
    for recipe in recipes:
        spec.with_recipe(recipe)
    if insecure:
        spec.set_insecure()
    for item in copy:
        src, sep, dst = item.rpartition(":")
        if not sep or not src or not dst:
            raise typer.BadParameter(f"expected SRC:DST, got {item!r}", param_hint="--copy")
        spec.copy(src, dst)
    envs = parse_pairs(env, "--env")
    if envs:
        spec.set_envs(envs)
    if workdir is not None:
        spec.set_workdir(workdir)
    for command in run:
        spec.run_cmd(command)
    if user is not None:  # last: RUN steps run as root, sandboxes as the user
        spec.set_user(user)
    made = Template.build(
        spec,
        name,
        on_log=None if quiet or as_json else _show,
        client=client(ctx),
        creds=creds,
        build_args=parse_pairs(build_arg, "--build-arg") or None,
        tags=tag or None,
        cpu=cpu,
        memory_mib=memory,
        disk_mib=disk,
        max_cpu=max_cpu,
        max_memory_mib=max_memory,
        max_disk_mib=max_disk,
        warmup=warmup,
        warm=warm,
        pool=pool or None,
        step_timeout=step_timeout,
        build_disk_mib=build_disk,
        network=network,
    )
    if as_json:
        print_json(made.to_dict())
    elif quiet:
        typer.echo(made.name)
    if pool and not as_json and not quiet:
        typer.echo(f"filling a pool of {pool} ready sandbox(es) in the background", err=True)


@templates_app.command("recipes")
def list_recipes(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
    verbose: bool = typer.Option(False, "--steps", help="Also show each recipe's steps."),
) -> None:
    """List the recipes `template create --with NAME` can start from."""
    found = client(ctx).recipes()
    if as_json:
        print_json(found)
        return
    width = max((len(r["name"]) for r in found), default=4)
    for recipe in found:
        typer.echo(f"{recipe['name'].ljust(width)}  {recipe['description']}")
        if verbose:
            for step in recipe["steps"]:
                typer.echo(f"{'':{width}}    RUN {step}")
            if recipe.get("start_cmd"):
                typer.echo(f"{'':{width}}    START {' '.join(recipe['start_cmd'])}")


@templates_app.command("ls")
def list_templates(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """List templates."""
    found = client(ctx).templates()
    if as_json:
        print_json([tpl.to_dict() for tpl in found])
        return
    rows = [("NAME", "IMAGE", "SOURCE", "CPU", "MEMORY", "DISK", "CEILINGS", "IN USE")]
    for t in found:
        ceilings = "/".join(
            "-" if v is None else f"{v:g}" for v in (t.max_cpu, t.max_memory_mib, t.max_disk_mib)
        )
        rows.append(
            (
                t.name,
                t.image[:19] if t.image.startswith("sha256:") else t.image,
                t.source if len(t.source) <= 40 else "…" + t.source[-39:],
                f"{t.cpu:g}",
                f"{t.memory_mib} MiB",
                f"{t.disk_mib} MiB",
                "-" if ceilings == "-/-/-" else ceilings,
                str(len(t.used_by)),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@templates_app.command("info")
def template_info(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME"),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Show a template: image, layers, defaults, ceilings and the sandboxes using it."""
    info = client(ctx).get_template(name)
    if as_json:
        print_json(info.to_dict())
        return
    for key, value in info.to_dict().items():
        if value in (None, [], {}, ""):
            continue
        typer.echo(f"{key:15} {value}")


@templates_app.command("rm")
def remove_template(ctx: typer.Context, name: str = typer.Argument(..., metavar="NAME")) -> None:
    """Remove a template (refused while sandboxes use it); unused images are collected."""
    client(ctx).delete_template(name)


@templates_app.command("logs")
def template_logs(ctx: typer.Context, name: str = typer.Argument(..., metavar="NAME")) -> None:
    """Print the output of the template's last build."""
    from corral.sdk import BuildEvent

    for raw in client(ctx).template_logs(name):
        event = BuildEvent.from_wire(raw)
        if event.type == "failed":
            sys.stdout.write(event.text)
        else:
            _show(event)
