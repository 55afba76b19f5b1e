"""Human output: Rich tables for listings, plain lines for single objects.

Rich is imported when a table is printed, not with this module (verbs import it at start).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from corral.sdk import Capacity, FileInfo, SandboxInfo, SnapshotInfo, TemplateInfo

__all__ = [
    "age",
    "number",
    "print_capacity",
    "print_files",
    "print_sandbox",
    "print_sandboxes",
    "print_snapshots",
    "print_templates",
]


def _console() -> Console:
    # Built per call so it writes to the sys.stdout of the moment (tests swap it).
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _table(*columns: str) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in columns:
        table.add_column(column, no_wrap=True)
    return table


def number(value: float) -> float | int:
    """16.0 → 16: whole numbers print (and serialize) without a fraction."""
    return int(value) if float(value).is_integer() else value


def age(created_at: float, now: float | None = None) -> str:
    seconds = max(0, int((now if now is not None else time.time()) - created_at))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def print_sandboxes(sandboxes: Iterable[SandboxInfo]) -> None:
    table = _table("ID", "STATE", "TEMPLATE", "CPU", "MEMORY", "DISK", "AGE")
    for sbx in sandboxes:
        table.add_row(
            sbx.id,
            sbx.state,
            sbx.template,
            str(number(sbx.cpu)),
            f"{sbx.memory_mib} MiB",
            f"{sbx.disk_mib} MiB",
            age(sbx.created_at),
        )
    _console().print(table)


def print_sandbox(sbx: SandboxInfo) -> None:
    lines = [
        ("id", sbx.id),
        ("state", sbx.state + (" (frozen while idle)" if sbx.frozen else "")),
        ("template", sbx.template),
        ("cpu", str(number(sbx.cpu))),
        ("memory", f"{sbx.memory_mib} MiB"),
        ("disk", f"{sbx.disk_mib} MiB"),
        ("age", age(sbx.created_at)),
        ("expires", "never" if sbx.expires_at is None else _until(sbx.expires_at)),
    ]
    if sbx.metadata:
        lines.append(("metadata", " ".join(f"{k}={v}" for k, v in sorted(sbx.metadata.items()))))
    if sbx.env:
        lines.append(("env", " ".join(sorted(sbx.env))))
    if sbx.secret_env_keys:  # the daemon never gives the values
        lines.append(("secret env", " ".join(sorted(sbx.secret_env_keys))))
    if sbx.brokered_secrets:
        lines.append(("secrets", " ".join(sorted(sbx.brokered_secrets)) + " (brokered)"))
    if sbx.expires_at is not None:
        lines.append(("on timeout", sbx.on_timeout))
    if sbx.auto_park_idle:
        lines.append(("auto park", f"after {sbx.auto_park_idle}s idle"))
    if sbx.auto_wake:
        lines.append(("auto wake", "yes"))
    if sbx.network is not None:
        lines.append(("network", sbx.network.mode))
        if sbx.network.allow:
            lines.append(("allow", " ".join(sbx.network.allow)))
        if sbx.network.deny:
            lines.append(("deny", " ".join(sbx.network.deny)))
    for port in sbx.ports:
        access = "public" if port.public else "token (corral port ls --json)"
        lines.append((f"port {port.port}", f"{port.url}  {access}"))
    if sbx.names:
        lines.append(("resolves", " ".join(sbx.names)))
    if sbx.serves_as:
        lines.append(("serves as", " ".join(sbx.serves_as)))
    if sbx.parent_id:
        lines.append(("parent", sbx.parent_id))
    if sbx.state == "parked":
        lines.append(("image", f"{sbx.image_mib} MiB"))
    if sbx.error:
        lines.append(("error", sbx.error))
    width = max(len(key) for key, _ in lines)
    for key, value in lines:
        print(f"{key.ljust(width)}  {value}")


def _until(deadline: float) -> str:
    left = deadline - time.time()
    return "now" if left <= 0 else f"in {age(0, left)}"


def print_capacity(capacity: Capacity) -> None:
    table = _table("RESOURCE", "TOTAL", "RESERVED", "FREE")
    for name, usage, unit in (
        ("cpu", capacity.cpu, " vCPU"),
        ("memory", capacity.memory, " MiB"),
        ("disk", capacity.disk, " MiB"),
    ):
        table.add_row(
            name,
            f"{number(usage.total)}{unit}",
            f"{number(usage.reserved)}{unit}",
            f"{number(usage.free)}{unit}",
        )
    console = _console()
    console.print(table)
    console.print(f"cpu overcommit: {capacity.cpu_overcommit}x")


def print_files(entries: Iterable[FileInfo]) -> None:
    table = _table("MODE", "SIZE", "MODIFIED", "NAME")
    for entry in entries:
        name = entry.path + ("/" if entry.is_dir else "")
        if entry.target:
            name += f" -> {entry.target}"
        modified = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.mtime))
        table.add_row(f"{entry.mode:04o}", str(entry.size), modified, name)
    _console().print(table)


def print_templates(templates: Iterable[TemplateInfo]) -> None:
    table = _table("NAME", "IMAGE", "CPU", "MEMORY", "DISK")
    for tpl in templates:
        table.add_row(
            tpl.name,
            tpl.image,
            str(number(tpl.cpu)),
            f"{tpl.memory_mib} MiB",
            f"{tpl.disk_mib} MiB",
        )
    _console().print(table)


def print_snapshots(snapshots: Iterable[SnapshotInfo]) -> None:
    table = _table("NAME", "KIND", "SOURCE", "TEMPLATE", "MEMORY", "SIZE", "AGE")
    for saved in snapshots:
        table.add_row(
            saved.name,
            saved.kind,
            saved.source_id,
            saved.template,
            f"{saved.memory_mib} MiB",
            f"{saved.size_mib} MiB",
            age(saved.created_at),
        )
    _console().print(table)
