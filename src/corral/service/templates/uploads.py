"""Uploads for template builds: build contexts and image archives sent by the client.

A build never reads a host path that a caller names. The client uploads what a build reads
(``POST /v1/templates/uploads?kind=KIND``, the body a tar stream): ``context`` (the Dockerfile's
dir or the ``--copy`` sources), ``oci`` (an OCI layout dir) or ``docker-archive`` (the archive
file itself). The body is streamed to a private dir under ``<data>/uploads``, bounded by
``build_upload_max_mib``; ``context`` and ``oci`` tars are unpacked there safely
(``images/context.py``) and the tar is dropped. The answer is a generated id.

A build names an upload (``context: ID``, ``base: upload:ID[:TAG]``) and takes it over: the
upload leaves the pending set and is removed with the build. An upload serves one build request:
a refused request removes the uploads it named too. Pending
uploads expire after ``build_upload_ttl_seconds``; at most ``build_uploads_pending`` are kept
(receiving ones included). All are removed when the daemon starts.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from corral.config import Settings
from corral.images.context import ContextError, ContextLimits, extract_tar
from corral.service.errors import CapacityExceeded, InvalidRequest, NotFound, TooLarge

__all__ = ["KINDS", "Upload", "UploadService"]

KINDS = ("context", "docker-archive", "oci")
_MIB = 1024 * 1024
_LABEL = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Upload:
    """One received upload. ``path`` is the unpacked dir (context, oci) or the archive file
    (docker-archive); ``label`` the client's name for it (only for messages and records)."""

    id: str
    kind: str
    label: str
    path: Path
    size: int
    members: int
    created_at: float

    @property
    def dir(self) -> Path:
        """The upload's own private dir (remove it to remove the upload)."""
        return self.path.parent


class UploadService:
    """The pending uploads of one daemon (in memory; their files under ``<data>/uploads``)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self.dir = settings.data_dir / "uploads"
        self._pending: dict[str, Upload] = {}
        self._receiving = 0

    def start(self) -> None:
        """Remove uploads a previous daemon left (nobody can claim them any more)."""
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    @property
    def limit_bytes(self) -> int:
        return self._settings.build_upload_max_mib * _MIB

    def _expire(self) -> None:
        cutoff = time.time() - self._settings.build_upload_ttl_seconds
        for upload in [u for u in self._pending.values() if u.created_at < cutoff]:
            self._pending.pop(upload.id, None)
            shutil.rmtree(upload.dir, ignore_errors=True)

    async def receive(self, kind: str, label: str | None, body: AsyncIterator[bytes]) -> Upload:
        """Store the streamed ``body`` as an upload of ``kind``; raises InvalidRequest when it is
        too large or (for tars that are unpacked) unsafe, CapacityExceeded when too many wait."""
        if kind not in KINDS:
            raise InvalidRequest(f"upload kind {kind!r} is not one of {', '.join(KINDS)}")
        self._expire()
        most = self._settings.build_uploads_pending
        if len(self._pending) + self._receiving >= most:
            raise CapacityExceeded(
                f"{most} uploads are already waiting for their builds (the limit); build with "
                f"them or wait {self._settings.build_upload_ttl_seconds:g} s for them to expire"
            )
        upload_id = "up-" + secrets.token_hex(12)
        name = _LABEL.sub("_", (label or kind).rsplit("/", 1)[-1])[:100] or kind
        work = self.dir / upload_id
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        work.mkdir(mode=0o700)
        self._receiving += 1
        try:
            raw = work / "upload.tar"
            size = 0
            with await asyncio.to_thread(open, raw, "wb") as out:
                async for chunk in body:
                    size += len(chunk)
                    if size > self.limit_bytes:
                        raise TooLarge(
                            f"the {kind} upload is larger than the limit of "
                            f"{self._settings.build_upload_max_mib} MiB (build_upload_max_mib)"
                        )
                    out.write(chunk)
            members = 0
            path = raw
            if kind != "docker-archive":
                path = work / "root"
                path.mkdir(mode=0o700)
                limits = ContextLimits(self.limit_bytes, self._settings.build_upload_max_files)
                try:
                    members = await asyncio.to_thread(extract_tar, raw, path, limits)
                except ContextError as exc:
                    raise InvalidRequest(f"refusing the {kind} upload {name!r}: {exc}") from exc
                raw.unlink()
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, work, True)
            raise
        finally:
            self._receiving -= 1
        upload = Upload(upload_id, kind, name, path, size, members, time.time())
        self._pending[upload_id] = upload
        return upload

    def get(self, upload_id: str, kinds: tuple[str, ...]) -> Upload:
        """The pending upload ``upload_id`` if it is of one of ``kinds``."""
        self._expire()
        upload = self._pending.get(upload_id)
        if upload is None:
            raise NotFound(
                f"upload {upload_id!r} not found (uploads serve one build and expire after "
                f"{self._settings.build_upload_ttl_seconds:g} s); upload it again"
            )
        if upload.kind not in kinds:
            raise InvalidRequest(
                f"upload {upload_id!r} is a {upload.kind} upload; expected {' or '.join(kinds)}"
            )
        return upload

    def discard(self, upload_ids: list[str]) -> None:
        """Remove pending uploads (those of a build request that was refused)."""
        for upload_id in upload_ids:
            upload = self._pending.pop(upload_id, None)
            if upload is not None:
                shutil.rmtree(upload.dir, ignore_errors=True)

    def claim(self, upload_id: str) -> Upload:
        """Take ``upload_id`` out of the pending set; the caller removes ``upload.dir``."""
        upload = self._pending.pop(upload_id, None)
        if upload is None:
            raise NotFound(f"upload {upload_id!r} was taken by another build; upload it again")
        return upload
