"""`corral top`: a live table of the running sandboxes' cpu, memory, disk and network use.

Network columns: bytes received (RX) and sent (TX) since each sandbox was created, humanized;
from the second refresh on, each is followed by its rate since the previous refresh.
"""

from __future__ import annotations

import time

import typer

from corral.cli._state import client, print_json

__all__ = ["humanize", "render_table", "top"]

CLEAR = "\x1b[H\x1b[2J"
Row = dict[str, object]


def _rows(ctx: typer.Context) -> list[Row]:
    sdk = client(ctx)
    rows: list[Row] = []
    for info in sdk.list_sandboxes(state="running"):
        try:
            sample = sdk.sandbox(info.id).metrics()
        except Exception:  # it ended between the listing and the sample
            continue
        rows.append(sample.to_dict() | {"template": info.template})
    return rows


def humanize(count: float) -> str:
    """Bytes as B, K, M, G or T with at most three significant digits (``1.5M``)."""
    for unit in ("B", "K", "M", "G"):
        if abs(count) < 1000:
            return f"{count:.0f}{unit}" if unit == "B" or count >= 100 else f"{count:.1f}{unit}"
        count /= 1024
    return f"{count:.1f}T"


def _network(row: Row, before: Row | None, key: str) -> str:
    total = float(row[key])  # type: ignore[arg-type]
    text = humanize(total)
    if before is not None:
        elapsed = float(row["at"]) - float(before["at"])  # type: ignore[arg-type]
        if elapsed > 0:
            rate = max(total - float(before[key]), 0.0) / elapsed  # type: ignore[arg-type]
            text += f" {humanize(rate)}/s"
    return text


def render_table(rows: list[Row], previous: dict[str, Row] | None = None) -> str:
    previous = previous or {}
    lines = [
        f"{'SANDBOX':<16} {'TEMPLATE':<14} {'CPU%':>6} {'MEM MiB':>15} {'DISK MiB':>15} "
        f"{'RX':>14} {'TX':>14}"
    ]
    for row in sorted(rows, key=lambda r: -float(r["cpu_used_pct"])):  # type: ignore[arg-type]
        memory = f"{row['memory_used_mib']:.0f}/{row['memory_total_mib']}"
        disk = f"{row['disk_used_mib']:.0f}/{row['disk_total_mib']}"
        before = previous.get(str(row["sandbox_id"]))
        rx = _network(row, before, "net_rx_bytes")
        tx = _network(row, before, "net_tx_bytes")
        lines.append(
            f"{row['sandbox_id']!s:<16} {str(row['template'])[:14]:<14} "
            f"{row['cpu_used_pct']:>6.1f} {memory:>15} {disk:>15} {rx:>14} {tx:>14}"
        )
    return "\n".join(lines)


def top(
    ctx: typer.Context,
    interval: float = typer.Option(2.0, "--interval", min=0.5, help="Seconds between refreshes."),
    once: bool = typer.Option(False, "--once", help="Print one table and exit."),
    as_json: bool = typer.Option(False, "--json", help="One JSON list (implies --once)."),
) -> None:
    """Running sandboxes (those this key may see) by cpu use, with network totals and rates;
    Ctrl-C stops."""
    if as_json:
        print_json(_rows(ctx))
        return
    previous: dict[str, Row] = {}
    while True:
        rows = _rows(ctx)
        table = render_table(rows, previous)
        if once:
            typer.echo(table)
            return
        typer.echo(CLEAR + time.strftime("%H:%M:%S ") + "corral top\n" + table)
        previous = {str(row["sandbox_id"]): row for row in rows}
        time.sleep(interval)
