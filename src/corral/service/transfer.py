"""Export and import: a parked sandbox or a snapshot as one checksummed file, to move between hosts.

Format: an uncompressed tar whose first member is ``corral-export.json`` (format version, kind,
the record, and the SHA-256 of every image file), followed by the image files under ``image/``.
Import verifies every file against the manifest while it extracts into a private directory, and
registers the sandbox (as parked) or the snapshot only when everything matched, so a truncated or
altered file is refused and leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import io
import json
import os
import shutil
import tarfile
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path
from typing import Any

from corral.service.errors import InvalidRequest, StateConflict
from corral.service.lifecycle import LifecycleService, refuse_secrets, seal_image
from corral.service.sandboxes import (
    SandboxService,
    image_complete,
    image_size_mib,
    new_sandbox_id,
    require_state,
)
from corral.service.snapshots import SnapshotService, check_name
from corral.storage import SandboxRecord, SnapshotRecord

FORMAT = 1
MANIFEST = "corral-export.json"
CHUNK = 1 << 20
SANDBOX_FIELDS = ("template", "cpu", "memory_mib", "disk_mib", "env", "metadata", "created_at")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _image_files(image: Path) -> list[Path]:
    return sorted(p for p in image.rglob("*") if p.is_file())


def _write_export(image: Path, kind: str, record: dict[str, Any], out: Any) -> None:
    files = _image_files(image)
    manifest = {
        "format": FORMAT,
        "kind": kind,
        "record": record,
        "files": {str(p.relative_to(image)): _sha256(p) for p in files},
        "exported_at": time.time(),
    }
    data = json.dumps(manifest, indent=1).encode()
    with tarfile.open(fileobj=out, mode="w|") as tar:
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(data)
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
        for path in files:
            tar.add(path, arcname="image/" + str(path.relative_to(image)), recursive=False)


async def _stream_export(image: Path, kind: str, record: dict[str, Any]) -> AsyncIterator[bytes]:
    """Produce the export tar on the fly through a pipe (never the whole file in memory)."""
    read_fd, write_fd = os.pipe()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            with os.fdopen(write_fd, "wb", buffering=CHUNK) as out:
                _write_export(image, kind, record, out)
        except BaseException as exc:  # reported to the reader below
            errors.append(exc)

    thread = threading.Thread(target=produce, name="corral-export", daemon=True)
    thread.start()
    with os.fdopen(read_fd, "rb", buffering=0) as source:
        while chunk := await asyncio.to_thread(source.read, CHUNK):
            yield chunk
    thread.join()
    if errors:
        raise errors[0]


def _extract_verified(archive: Path, target: Path) -> dict[str, Any]:
    """Extract into ``target``/image, checking every file against the manifest."""
    try:
        with tarfile.open(archive, mode="r|") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST:
                raise InvalidRequest(f"not a corral export: it does not start with {MANIFEST}")
            handle = tar.extractfile(first)
            assert handle is not None
            manifest = json.loads(handle.read())
            if manifest.get("format") != FORMAT or manifest.get("kind") not in (
                "sandbox",
                "snapshot",
            ):
                raise InvalidRequest("unsupported corral export (unknown format or kind)")
            expected: dict[str, str] = dict(manifest["files"])
            seen: set[str] = set()
            for member in tar:
                if member is first:
                    continue  # iteration starts over the members already read
                if not member.isfile() or not member.name.startswith("image/"):
                    raise InvalidRequest(f"unexpected member {member.name!r} in the export")
                rel = member.name[len("image/") :]
                if rel not in expected or ".." in Path(rel).parts or rel.startswith("/"):
                    raise InvalidRequest(f"file {rel!r} is not listed in the export's manifest")
                dest = target / "image" / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                digest = hashlib.sha256()
                source = tar.extractfile(member)
                assert source is not None
                with open(dest, "wb") as out:
                    while chunk := source.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
                if digest.hexdigest() != expected[rel]:
                    raise InvalidRequest(f"checksum mismatch for {rel!r}: the export is corrupt")
                seen.add(rel)
    except (tarfile.TarError, EOFError, json.JSONDecodeError, KeyError) as exc:
        raise InvalidRequest(f"the export is damaged or truncated: {exc}") from exc
    missing = sorted(set(expected) - seen)
    if missing:
        raise InvalidRequest(f"the export is truncated: missing {', '.join(missing[:5])}")
    return manifest


class TransferService:
    def __init__(
        self, sandboxes: SandboxService, lifecycle: LifecycleService, snapshots: SnapshotService
    ) -> None:
        self.sb = sandboxes
        self.lifecycle = lifecycle
        self.snapshots = snapshots
        self.db = sandboxes.db

    def export_sandbox(self, sandbox_id: str) -> AsyncIterator[bytes]:
        record = self.sb.get(sandbox_id)
        refuse_secrets(record, "export")
        require_state(record, "export", "parked")
        if not image_complete(record.image_path):
            raise StateConflict(f"sandbox {sandbox_id} has no complete parked image to export")
        fields = {name: getattr(record, name) for name in SANDBOX_FIELDS}
        fields["id"] = record.id
        return _stream_export(Path(record.image_path or ""), "sandbox", fields)

    def export_snapshot(self, name: str) -> AsyncIterator[bytes]:
        snapshot = self.snapshots.get(name)
        return _stream_export(Path(snapshot.image_path), "snapshot", dataclasses.asdict(snapshot))

    async def import_file(self, data: AsyncIterable[bytes]) -> SandboxRecord | SnapshotRecord:
        work = self.lifecycle.work_dir / f"import-{new_sandbox_id()[3:]}"
        work.mkdir(parents=True)
        try:
            archive = work / "upload.tar"
            with open(archive, "wb") as out:
                async for chunk in data:
                    await asyncio.to_thread(out.write, chunk)
            manifest = await asyncio.to_thread(_extract_verified, archive, work)
            archive.unlink()
            partial = work / "image"
            if manifest["kind"] == "sandbox":
                return await self._register_sandbox(manifest["record"], partial)
            return await self._register_snapshot(manifest["record"], partial)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    async def _register_sandbox(self, fields: dict[str, Any], partial: Path) -> SandboxRecord:
        self.sb.templates.get(fields["template"])  # NotFound names the missing template
        sandbox_id = fields.get("id") or ""
        if self.db.sandboxes.get(sandbox_id) is not None or not sandbox_id.startswith("sb-"):
            sandbox_id = new_sandbox_id()
        final = self.lifecycle.parked_dir / sandbox_id
        await asyncio.to_thread(seal_image, partial, final)
        size = await asyncio.to_thread(image_size_mib, final)
        record = SandboxRecord(
            id=sandbox_id,
            state="parked",
            template=fields["template"],
            cpu=float(fields["cpu"]),
            memory_mib=int(fields["memory_mib"]),
            disk_mib=int(fields["disk_mib"]),
            env=dict(fields.get("env") or {}),
            metadata=dict(fields.get("metadata") or {}),
            created_at=float(fields.get("created_at") or time.time()),
            image_path=str(final),
            image_mib=size,
        )
        async with self.sb.admission:
            report = self.sb.capacity()
            if size > report.disk.free:
                shutil.rmtree(final, ignore_errors=True)
                raise InvalidRequest(
                    f"importing needs {size} MiB of disk and {report.disk.free:g} MiB is free"
                )
            self.db.sandboxes.add(record)
        return record

    async def _register_snapshot(self, fields: dict[str, Any], partial: Path) -> SnapshotRecord:
        name = check_name(str(fields["name"]))
        if self.db.snapshots.get(name) is not None:
            raise StateConflict(f"snapshot {name!r} already exists here; remove it first")
        self.sb.templates.get(fields["template"])
        final = self.snapshots.dir / name
        await asyncio.to_thread(seal_image, partial, final)
        record = SnapshotRecord(
            **{
                **fields,
                "state": "ready",
                "image_path": str(final),
                "size_mib": image_size_mib(final),
            }
        )
        self.db.snapshots.add(record)
        return record
