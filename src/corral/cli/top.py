"""`corral top`: a live table of the running sandboxes' cpu, memory and disk use."""

from __future__ import annotations

import time

import typer

from corral.cli._state import client, print_json

__all__ = ["top"]

CLEAR = "\x1b[H\x1b[2J"


def _rows(ctx: typer.Context) -> list[dict[str, object]]:
    sdk = client(ctx)
    rows: list[dict[str, object]] = []
    for info in sdk.list_sandboxes(state="running"):
        try:
            sample = sdk.sandbox(info.id).metrics()
        except Exception:  # it ended between the listing and the sample
            continue
        rows.append(sample.to_dict() | {"template": info.template})
    return rows


def _table(rows: list[dict[str, object]]) -> str:
    lines = [f"{'SANDBOX':<16} {'TEMPLATE':<14} {'CPU%':>6} {'MEM MiB':>15} {'DISK MiB':>15}"]
    for row in sorted(rows, key=lambda r: -float(r["cpu_used_pct"])):  # type: ignore[arg-type]
        memory = f"{row['memory_used_mib']:.0f}/{row['memory_total_mib']}"
        disk = f"{row['disk_used_mib']:.0f}/{row['disk_total_mib']}"
        lines.append(
            f"{row['sandbox_id']!s:<16} {str(row['template'])[:14]:<14} "
            f"{row['cpu_used_pct']:>6.1f} {memory:>15} {disk:>15}"
        )
    return "\n".join(lines)


def top(
    ctx: typer.Context,
    interval: float = typer.Option(2.0, "--interval", min=0.5, help="Seconds between refreshes."),
    once: bool = typer.Option(False, "--once", help="Print one table and exit."),
    as_json: bool = typer.Option(False, "--json", help="One JSON list (implies --once)."),
) -> None:
    """Running sandboxes (those this key may see) by cpu use; Ctrl-C stops."""
    if as_json:
        print_json(_rows(ctx))
        return
    while True:
        table = _table(_rows(ctx))
        if once:
            typer.echo(table)
            return
        typer.echo(CLEAR + time.strftime("%H:%M:%S ") + "corral top\n" + table)
        time.sleep(interval)
