"""Export and import: a parked sandbox or a snapshot as one signed file, to move between hosts.

The file format and its strict reader are in ``export_format``; signing and trust in ``trust``.

Import treats the file as hostile. It is received into a private work dir (bounded by the free
disk), its manifest is validated against a schema (unknown fields, paths, ids and states are
refused: the importer derives them), its signature is checked, and only then are its files
written, each checked against its size and SHA-256. The sandbox always gets a fresh id; a
snapshot keeps its (validated) name. Nothing is registered, and nothing is left behind, unless
every step passed.

Memory images are input to runsc's state decoder, which is not built to resist hostile input: they
are restored only from a trusted signer (this workspace, or a key added with ``corral trust add``).
``fs_only`` imports what holds no memory image from anyone: an fs snapshot, whose files are
applied inside a fresh sandbox by the sandbox itself. A parked sandbox or a memory snapshot keeps
its filesystem inside its memory image (runsc saves the overlay in the checkpoint), so there is
nothing to import without the memory: such an export is refused under ``fs_only`` with a message
that says so.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.config import Settings
from corral.paths import inside
from corral.service import access
from corral.service.audit import note_target
from corral.service.errors import CapacityExceeded, CorralError, InvalidRequest, StateConflict
from corral.service.images import (
    IMAGE_COMPLETE,
    host_free_mib,
    image_complete,
    image_size_mib,
    parked_dir,
    remove_parked_image,
    seal_image,
    work_dir,
)
from corral.service.model import (
    Action,
    CreateRequest,
    SandboxState,
    new_sandbox_id,
    refuse_secrets,
    require_state,
)
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.admission import Admission
from corral.service.snapshots.export_format import (
    CHUNK,
    ExportReader,
    Manifest,
    build_manifest,
    image_files,
    parse_manifest,
    write_export,
)
from corral.service.snapshots.files import FS_ARCHIVE, FS_DELETED, load_deleted
from corral.service.snapshots.service import SnapshotService, check_name
from corral.service.snapshots.trust import Signer, TrustService, UntrustedExport
from corral.storage import SandboxRecord, SnapshotRecord

__all__ = ["Imported", "TransferService"]

log = logging.getLogger("corral.transfer")

SANDBOX_FIELDS = ("template", "cpu", "memory_mib", "disk_mib", "env", "metadata", "created_at")
SNAPSHOT_FIELDS = (
    "name",
    "kind",
    "source_id",
    "template",
    "cpu",
    "memory_mib",
    "disk_mib",
    "env",
    "created_at",
    "image",
)
FS_FILES = frozenset({FS_ARCHIVE, FS_DELETED})
MAX_DELETED_BYTES = 16 << 20
_MIB = 1024 * 1024


@dataclass(frozen=True)
class Imported:
    """What an import brought in, and the trusted key that signed it (None: an ``fs_only``
    import of an export nobody trusted)."""

    record: SandboxRecord | SnapshotRecord
    signer: Signer | None


async def _stream_export(
    image: Path, kind: str, record: dict[str, Any], trust: TrustService
) -> AsyncIterator[bytes]:
    """Produce the signed export tar on the fly through a pipe (never the whole file in memory)."""
    files = await asyncio.to_thread(image_files, image, (IMAGE_COMPLETE,))
    manifest = await asyncio.to_thread(build_manifest, files, kind, record)
    signature = {"key": trust.public_key, "signature": trust.sign(manifest)}
    read_fd, write_fd = os.pipe()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            with os.fdopen(write_fd, "wb", buffering=CHUNK) as out:
                write_export(out, manifest, signature, files)
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


class TransferService:
    """Exports parked sandboxes and snapshots as signed archives, and imports them."""

    def __init__(
        self,
        settings: Settings,
        sandboxes: SandboxService,
        admission: Admission,
        snapshots: SnapshotService,
        trust: TrustService,
    ) -> None:
        self.settings = settings
        self.sandboxes = sandboxes
        self.admission = admission
        self.snapshots = snapshots
        self.trust = trust
        self.db = sandboxes.db
        self.templates = sandboxes.templates
        self.parked_dir = parked_dir(settings)
        self.work_dir = work_dir(settings)

    # ------------------------------------------------------------------------- export
    def export_sandbox(self, sandbox_id: str) -> AsyncIterator[bytes]:
        record = self.sandboxes.get(sandbox_id)
        refuse_secrets(record, "export")
        require_state(record, Action.EXPORT)
        if not image_complete(record.image_path):
            raise StateConflict(f"sandbox {sandbox_id} has no complete parked image to export")
        image = inside(self.parked_dir, record.image_path or "")
        fields = {name: getattr(record, name) for name in SANDBOX_FIELDS}
        return _stream_export(image, "sandbox", fields, self.trust)

    def export_snapshot(self, name: str) -> AsyncIterator[bytes]:
        snapshot = self.snapshots.get(name)
        image = inside(self.snapshots.dir, snapshot.image_path)
        fields = {field: getattr(snapshot, field) for field in SNAPSHOT_FIELDS}
        return _stream_export(image, "snapshot", fields, self.trust)

    # ------------------------------------------------------------------------- import
    async def import_file(self, data: AsyncIterable[bytes], *, fs_only: bool = False) -> Imported:
        work = inside(self.work_dir, f"import-{secrets.token_hex(8)}")
        work.mkdir(mode=0o700)
        try:
            archive = work / "upload.tar"
            await self._receive(data, archive)
            with await asyncio.to_thread(open, archive, "rb") as handle:
                reader = ExportReader(handle)
                await asyncio.to_thread(reader.open)
                manifest = parse_manifest(reader.manifest_bytes)
                signer = self._check_signer(reader, manifest, fs_only)
                partial = work / "image"
                partial.mkdir(mode=0o700)
                record: SandboxRecord | SnapshotRecord
                if manifest.kind == "sandbox":
                    record = await self._import_sandbox(manifest, reader, partial)
                else:
                    record = await self._import_snapshot(manifest, reader, partial)
        finally:
            await asyncio.to_thread(shutil.rmtree, work, True)
        name = f"sandbox {record.id}" if isinstance(record, SandboxRecord) else record.name
        by = signer.name if signer else "nobody trusted (files only)"
        log.info("imported %s, signed by %s", name, by)
        return Imported(record, signer)

    def _free_disk_mib(self) -> int:
        return int(min(host_free_mib(self.work_dir), self.admission.capacity().disk.free))

    async def _receive(self, data: AsyncIterable[bytes], archive: Path) -> None:
        """Write the upload to ``archive``, refusing it once it outgrows the free disk."""
        limit = self._free_disk_mib() * _MIB
        received = 0
        with await asyncio.to_thread(open, archive, "wb") as out:
            async for chunk in data:
                received += len(chunk)
                if received > limit:
                    raise CapacityExceeded(
                        f"the upload is larger than the {limit // _MIB} MiB of disk that is free; "
                        "free some disk (kill sandboxes, remove snapshots) and import again"
                    )
                await asyncio.to_thread(out.write, chunk)

    def _check_signer(
        self, reader: ExportReader, manifest: Manifest, fs_only: bool
    ) -> Signer | None:
        """The trusted signer, or None under ``fs_only``; an untrusted export is refused."""
        key, signature = reader.signature.get("key"), reader.signature.get("signature")
        if not (isinstance(key, str) or key is None) or not (
            isinstance(signature, str) or signature is None
        ):
            raise InvalidRequest("the export's signature record is not valid")
        try:
            signer = self.trust.verify(reader.manifest_bytes, key, signature)
        except UntrustedExport:
            if not fs_only:
                raise
            signer = None
        holds_memory = manifest.kind == "sandbox" or manifest.record.get("kind") != "fs"
        if (fs_only or signer is None) and holds_memory:
            what = "a parked sandbox" if manifest.kind == "sandbox" else "a memory snapshot"
            raise UntrustedExport(
                f"--fs-only imports only files, and this export is {what}, whose files are "
                "inside its memory image (runsc keeps them in the checkpoint); its memory is "
                "restored only from a trusted signer. Trust its signer (`corral trust add NAME "
                "KEY`, the key from `corral trust show` on its host) and import it without "
                "--fs-only, or ask for an fs snapshot export (`corral snapshot ID NAME "
                "--fs-only`, then `corral export snapshot:NAME FILE`)"
            )
        return signer

    def _check_space(self, manifest: Manifest) -> None:
        need = -(-sum(entry.size for entry in manifest.files.values()) // _MIB)
        free = self._free_disk_mib()
        if need > free:
            raise CapacityExceeded(f"importing needs {need} MiB of disk and {free} MiB is free")

    def _check_resources(self, template: str, cpu: float, memory: int, disk: int, env: Any) -> None:
        """The record's resources within this workspace's policy; the template exists here."""
        self.admission.resolve(
            CreateRequest(
                template=template, cpu=cpu, memory_mib=memory, disk_mib=disk, env=dict(env)
            )
        )

    async def _import_sandbox(
        self, manifest: Manifest, reader: ExportReader, partial: Path
    ) -> SandboxRecord:
        fields = manifest.sandbox()
        self._check_resources(
            fields.template, fields.cpu, fields.memory_mib, fields.disk_mib, fields.env
        )
        self._check_space(manifest)
        await asyncio.to_thread(reader.extract, partial, manifest.files, set(manifest.files))
        sandbox_id = new_sandbox_id()  # never the exporter's: ids (and paths) are ours
        final = inside(self.parked_dir, sandbox_id)
        await asyncio.to_thread(seal_image, partial, final, root=self.settings.data_dir)
        size = await asyncio.to_thread(image_size_mib, final)
        record = SandboxRecord(
            id=sandbox_id,
            state=SandboxState.PARKED,
            template=fields.template,
            cpu=fields.cpu,
            memory_mib=fields.memory_mib,
            disk_mib=fields.disk_mib,
            env=dict(fields.env),
            metadata=dict(fields.metadata),
            created_at=min(fields.created_at, time.time()),
            image_path=str(final),
            image_mib=size,
            owner=access.new_owner(),
        )
        note_target(record.id)
        try:
            await self.admission.admit_parked(record, size)
        except CorralError:  # over capacity or over a quota of the importing key
            await asyncio.to_thread(remove_parked_image, self.settings, final)
            raise
        return record

    async def _import_snapshot(
        self, manifest: Manifest, reader: ExportReader, partial: Path
    ) -> SnapshotRecord:
        fields = manifest.snapshot()
        name = check_name(fields.name)
        if self.db.snapshots.get(name) is not None:
            raise StateConflict(f"snapshot {name!r} already exists here; remove it first")
        self._check_resources(
            fields.template, fields.cpu, fields.memory_mib, fields.disk_mib, fields.env
        )
        image = fields.image if fields.kind == "memory" else None  # fs: the template's, here
        if image is not None:  # a memory image restores only onto the root it was made on
            self.templates.image_rootfs(image, fields.template)  # NotFound if not here
        if fields.kind == "fs":
            if set(manifest.files) != FS_FILES:
                raise InvalidRequest(
                    f"an fs snapshot export holds exactly {', '.join(sorted(FS_FILES))}; this "
                    f"one holds {', '.join(sorted(manifest.files))}"
                )
            if manifest.files[FS_DELETED].size > MAX_DELETED_BYTES:
                raise InvalidRequest(f"{FS_DELETED} is larger than {MAX_DELETED_BYTES} bytes")
            limit = fields.disk_mib * _MIB + (64 << 20)
            if manifest.files[FS_ARCHIVE].size > limit:
                raise InvalidRequest(
                    f"{FS_ARCHIVE} is larger than the snapshot's {fields.disk_mib} MiB disk"
                )
        self._check_space(manifest)
        await asyncio.to_thread(reader.extract, partial, manifest.files, set(manifest.files))
        if fields.kind == "fs":
            await asyncio.to_thread(_check_deleted_list, partial / FS_DELETED)
        final = inside(self.snapshots.dir, name)
        await asyncio.to_thread(seal_image, partial, final, root=self.settings.data_dir)
        record = SnapshotRecord(
            name=name,
            state="ready",
            kind=fields.kind,
            source_id=fields.source_id,
            template=fields.template,
            cpu=fields.cpu,
            memory_mib=fields.memory_mib,
            disk_mib=fields.disk_mib,
            env=dict(fields.env),
            image_path=str(final),
            size_mib=await asyncio.to_thread(image_size_mib, final),
            created_at=min(fields.created_at, time.time()),
            image=image,
            owner=access.new_owner(),
        )
        self.db.snapshots.add(record)
        return record


def _check_deleted_list(path: Path) -> None:
    load_deleted(path)
