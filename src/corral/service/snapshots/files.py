"""Filesystem snapshots: capturing the files a sandbox changed into an image, and applying such
an image to a new sandbox.

An fs image is ``FS_ARCHIVE`` (a tar of the changed files) and ``FS_DELETED`` (the image's paths
the sandbox deleted, as base64 of raw bytes). Both are made and applied inside the sandbox by the
daemon's own interpreter (injected read-only, ``fs_capture``'s scripts), never the image's tools;
what comes out of the sandbox is bounded (``run_collect``) and parsed as hostile.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from pathlib import Path
from typing import Any

from corral.config import Settings
from corral.runtime.agent_client import AgentClient, AgentError
from corral.service.errors import InvalidRequest, OperationFailed
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.live import LiveSandboxes
from corral.service.snapshots import fs_capture
from corral.storage import SandboxRecord

__all__ = [
    "FS_ARCHIVE",
    "FS_DELETED",
    "FileSnapshots",
    "OutputTooLarge",
    "load_deleted",
    "run_collect",
]

FS_ARCHIVE = "files.tar"
FS_DELETED = "deleted.json"
RESTORE_TAR = "/tmp/.corral-restore.tar"
LIST_FILE = "/tmp/.corral-snapshot.list"


async def run_collect(
    client: AgentClient, cmd: list[str], sink: Any, what: str, limit: int | None = None
) -> None:
    """Run ``cmd`` in the sandbox, writing its stdout to ``sink``; raise with its stderr. With
    ``limit``, more than ``limit`` bytes of output kill the process and raise OutputTooLarge."""
    stderr = b""
    exit_code: int | None = None
    received = 0
    pid: int | None = None
    try:
        async for event in client.stream_process({"cmd": cmd}):
            kind = event.get("type")
            if kind == "start":
                pid = event.get("pid")
            elif kind == "stdout":
                data = base64.b64decode(event["data"])
                received += len(data)
                if limit is not None and received > limit:
                    if isinstance(pid, int):
                        with contextlib.suppress(AgentError):
                            await client.signal(pid, "SIGKILL")
                    raise OutputTooLarge(f"{what}: its output passed {limit} bytes")
                await asyncio.to_thread(sink.write, data)
            elif kind == "stderr":
                stderr = (stderr + base64.b64decode(event["data"]))[-2000:]
            elif kind == "exit":
                exit_code = event.get("exit_code")
    except AgentError as exc:
        raise OperationFailed(f"{what}: {exc}") from exc
    if exit_code != 0:
        raise OperationFailed(
            f"{what}: {cmd[0]} exited {exit_code}: {stderr.decode(errors='replace').strip()}"
        )


class OutputTooLarge(InvalidRequest):
    """A command in the sandbox wrote more than the host would take."""


def load_deleted(path: Path) -> list[str]:
    """An fs snapshot's list of deleted paths: absolute sandbox paths (raw bytes, base64)."""
    try:
        items = json.loads(path.read_bytes())
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ValueError("not a list of strings")
        paths = [os.fsdecode(fs_capture.check_path(base64.b64decode(i))) for i in items]
    except (ValueError, fs_capture.BadListing) as exc:
        raise InvalidRequest(f"the snapshot's list of deleted paths is not valid: {exc}") from exc
    return paths


class FileSnapshots:
    """Captures and applies fs snapshot images through sandboxes' agents (the caller holds the
    sandbox's lock and owns the image dirs)."""

    def __init__(self, settings: Settings, sandboxes: SandboxService, live: LiveSandboxes) -> None:
        self.settings = settings
        self.sandboxes = sandboxes
        self.live = live

    async def capture(self, source: SandboxRecord, partial: Path) -> None:
        """Tar the files that differ from the sandbox's image, and list the image's deleted
        paths. The sandbox's upper layer lives in gVisor's filestore, which the host cannot read
        as a tree, so the lists and the tar are made inside the sandbox, by the daemon's own
        interpreter (injected read-only, see ``fs_capture``), never the image's tools. Their
        output is bounded and parsed as hostile: the host compares the listing with its own
        walk of the image and never joins a path from the sandbox onto a host path."""
        client = self.sandboxes.agent(source.id, "snapshot")
        rootfs = self.sandboxes.rootfs_of(source)
        python = self.live.injected_python()
        await asyncio.to_thread(partial.mkdir, parents=True)
        what = f"snapshotting the files of sandbox {source.id}"
        max_files = self.settings.snapshot_max_files
        listing = fs_capture.BoundedBuffer()
        try:
            await run_collect(
                client,
                [*python, "-c", fs_capture.LIST_SCRIPT, str(max_files)],
                listing,
                what,
                limit=fs_capture.listing_limit(max_files),
            )
        except OutputTooLarge as exc:
            raise InvalidRequest(
                f"cannot snapshot the files of sandbox {source.id}: it holds more than "
                f"{max_files} files (or its listing passed the limit); remove files or take a "
                "memory snapshot"
            ) from exc
        entries = await asyncio.to_thread(fs_capture.parse_listing, listing.data(), max_files)
        image = await asyncio.to_thread(fs_capture.walk_image, rootfs)
        changed, deleted = fs_capture.compare(entries, image)
        (partial / FS_DELETED).write_text(
            json.dumps([base64.b64encode(path).decode() for path in deleted])
        )
        limit = source.disk_mib * 1024 * 1024 + len(changed) * 2048 + (8 << 20)
        with await asyncio.to_thread(open, partial / FS_ARCHIVE, "wb") as sink:
            if changed:
                await client.write_file(LIST_FILE, b"\0".join(changed), mode=0o600, parents=True)
                tar = [*python, "-c", fs_capture.TAR_SCRIPT, LIST_FILE]
                try:
                    await run_collect(client, tar, sink, what, limit=limit)
                except OutputTooLarge as exc:
                    raise InvalidRequest(
                        f"cannot snapshot the files of sandbox {source.id}: its files came to "
                        f"more than its {source.disk_mib} MiB disk"
                    ) from exc
                with contextlib.suppress(AgentError):
                    await client.remove(LIST_FILE, False)
            sink.flush()
            os.fsync(sink.fileno())

    async def apply(self, record: SandboxRecord, image: Path) -> None:
        """Extract an fs snapshot's files into a new sandbox, then delete the paths it lists."""
        client = self.sandboxes.agent(record.id, "restore files into")
        what = f"restoring files into sandbox {record.id}"
        archive = image / FS_ARCHIVE
        deleted = await asyncio.to_thread(load_deleted, image / FS_DELETED)
        if archive.stat().st_size:
            await client.write_file(RESTORE_TAR, _read_chunks(archive), mode=0o600, parents=True)
            await run_collect(
                client,
                [*self.live.injected_python(), "-c", fs_capture.EXTRACT_SCRIPT, RESTORE_TAR],
                fs_capture.BoundedBuffer(),
                what,
                limit=1 << 20,
            )
        for path in deleted:
            with contextlib.suppress(AgentError):
                await client.remove(path, True)


async def _read_chunks(path: Path, size: int = 1 << 20) -> Any:
    with await asyncio.to_thread(open, path, "rb") as handle:
        while chunk := await asyncio.to_thread(handle.read, size):
            yield chunk
