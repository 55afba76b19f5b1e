"""Snapshots: saved sandbox states that new sandboxes restore from, any number of times.

A ``memory`` snapshot is a runtime checkpoint taken with the sandbox left running: sandboxes
restored from it continue with its processes. An ``fs`` snapshot holds only files: those changed
since the template's image was made (a tar made inside the sandbox) and the list of the image's
paths that were deleted; restoring boots the template fresh and applies both.

Images live in ``<data>/snapshots/<name>``, written as ``<name>.partial`` and sealed (see
``lifecycle.seal_image``); a record stays ``creating`` until its image is sealed, so a crash never
leaves a snapshot that looks usable but is not.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from corral.runtime.agent_client import AgentClient, AgentError
from corral.runtime.base import RuntimeFailure
from corral.service.errors import (
    CapacityExceeded,
    InvalidRequest,
    NotFound,
    OperationFailed,
    StateConflict,
)
from corral.service.lifecycle import LifecycleService, refuse_secrets, seal_image
from corral.service.sandboxes import (
    CreateRequest,
    SandboxService,
    image_complete,
    image_size_mib,
    require_state,
)
from corral.storage import SandboxRecord, SnapshotRecord

log = logging.getLogger("corral.snapshots")

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FS_ARCHIVE = "files.tar"
FS_DELETED = "deleted.json"
RESTORE_TAR = "/tmp/.corral-restore.tar"
LIST_FILE = "/tmp/.corral-snapshot.list"
PRUNE = ("/proc", "/sys", "/dev", "/.corral", "/run")


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise InvalidRequest(
            f"snapshot name {name!r} is not valid: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


async def run_collect(client: AgentClient, cmd: list[str], sink: Any, what: str) -> None:
    """Run ``cmd`` in the sandbox, writing its stdout to ``sink``; raise with its stderr."""
    stderr = b""
    exit_code: int | None = None
    try:
        async for event in client.stream_process({"cmd": cmd}):
            kind = event.get("type")
            if kind == "stdout":
                await asyncio.to_thread(sink.write, base64.b64decode(event["data"]))
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


class SnapshotService:
    def __init__(self, sandboxes: SandboxService, lifecycle: LifecycleService) -> None:
        self.sb = sandboxes
        self.lifecycle = lifecycle
        self.db = sandboxes.db
        self.dir = sandboxes.settings.data_dir / "snapshots"

    async def start(self) -> None:
        """Drop snapshots whose image was never sealed (a crash while snapshotting)."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for record in self.db.snapshots.list():
            if record.state != "ready" or not image_complete(record.image_path):
                log.warning("snapshot %s: incomplete after a restart; removing it", record.name)
                shutil.rmtree(record.image_path, ignore_errors=True)
                self.db.snapshots.delete(record.name)
        for partial in self.dir.glob("*.partial"):
            shutil.rmtree(partial, ignore_errors=True)

    def list(self) -> list[SnapshotRecord]:
        return [s for s in self.db.snapshots.list() if s.state == "ready"]

    def get(self, name: str) -> SnapshotRecord:
        record = self.db.snapshots.get(name)
        if record is None or record.state != "ready":
            raise NotFound(f"snapshot {name!r} not found")
        return record

    async def remove(self, name: str) -> None:
        record = self.get(name)
        self.db.snapshots.delete(name)
        await asyncio.to_thread(shutil.rmtree, record.image_path, True)

    # ---------------------------------------------------------------------------- take
    async def take(
        self, sandbox_id: str, name: str, *, fs_only: bool = False, allow_secrets: bool = False
    ) -> SnapshotRecord:
        check_name(name)
        async with self.sb.lock(sandbox_id):
            source = self.sb.get(sandbox_id)
            require_state(source, "snapshot", "running")
            if not fs_only:
                refuse_secrets(source, "memory snapshot")
            elif source.secret_keys and not allow_secrets:
                raise StateConflict(
                    f"sandbox {sandbox_id} holds secrets ({', '.join(source.secret_keys)}); its "
                    "files may contain them too. Pass allow_secrets (--allow-secrets) to take a "
                    "filesystem-only snapshot anyway",
                    code="secret_bearing",
                )
            if self.db.snapshots.get(name) is not None:
                raise StateConflict(f"snapshot {name!r} already exists; remove it or pick another")
            await self._check_space(source, fs_only)
            partial, final = self.dir / f"{name}.partial", self.dir / name
            shutil.rmtree(partial, ignore_errors=True)
            template = self.sb.templates.get(source.template)
            record = SnapshotRecord(
                name=name,
                state="creating",
                kind="fs" if fs_only else "memory",
                source_id=source.id,
                template=source.template,
                cpu=source.cpu,
                memory_mib=source.memory_mib,
                disk_mib=source.disk_mib,
                env=dict(source.env),
                image_path=str(final),
                created_at=time.time(),
                image=self.sb.templates.image_of(source.id) or template.image,
            )
            self.db.snapshots.add(record)
            self.db.sandboxes.update(sandbox_id, operation="snapshotting")
            try:
                if fs_only:
                    await self._capture_files(source, partial)
                else:
                    self.lifecycle.crash_point("snapshot:before-checkpoint")
                    await self.sb.checkpoint(sandbox_id, partial, leave_running=True)
                self.lifecycle.crash_point("snapshot:after-checkpoint")
                await asyncio.to_thread(seal_image, partial, final)
            except BaseException as exc:
                shutil.rmtree(partial, ignore_errors=True)
                self.db.snapshots.delete(name)
                if isinstance(exc, RuntimeFailure):
                    raise OperationFailed(f"snapshotting sandbox {sandbox_id}: {exc}") from exc
                raise
            finally:
                with contextlib.suppress(KeyError):
                    self.db.sandboxes.update(sandbox_id, operation=None)
            size = await asyncio.to_thread(image_size_mib, final)
            log.info(
                "sandbox %s: snapshot %s taken (%s, %d MiB)", sandbox_id, name, record.kind, size
            )
            return self.db.snapshots.update(name, state="ready", size_mib=size)

    async def _check_space(self, source: SandboxRecord, fs_only: bool) -> None:
        used = source.disk_mib
        with contextlib.suppress(RuntimeFailure):
            used = await self.sb.runtime.disk_usage_mib(source.id)
        estimate = used if fs_only else source.memory_mib + used
        host_free = shutil.disk_usage(self.dir).free // (1024 * 1024)
        free = min(host_free, int(self.sb.capacity().disk.free))
        if estimate > free:
            raise CapacityExceeded(
                f"cannot snapshot sandbox {source.id}: the image may take up to {estimate} MiB "
                f"of disk and only {free} MiB is free"
            )

    async def _capture_files(self, source: SandboxRecord, partial: Path) -> None:
        """Tar the files that differ from the sandbox's image, and list the image's deleted
        paths: the sandbox lists its files (type, size, mtime) and the host compares them with
        the image it has on disk."""
        client = self.sb.agent(source.id, "snapshot")
        rootfs = self.sb.rootfs_of(source)
        partial.mkdir(parents=True)
        prune: list[str] = []
        for path in PRUNE:
            prune += ["-path", path, "-prune", "-o"]
        what = f"snapshotting the files of sandbox {source.id}"
        listing = _Collector()
        find = ["find", "/", "-xdev", *prune, "-printf", "%y %s %T@ %p\\0"]
        await run_collect(client, find, listing, what + " (this needs GNU find and tar)")
        entries = [e for e in listing.data.split(b"\0") if e]
        changed, present = await asyncio.to_thread(_changed_paths, rootfs, entries)
        deleted = await asyncio.to_thread(_deleted_paths, rootfs, present)
        (partial / FS_DELETED).write_text(json.dumps(deleted))
        with open(partial / FS_ARCHIVE, "wb") as sink:
            if changed:
                await client.write_file(LIST_FILE, b"\0".join(changed), mode=0o600, parents=True)
                tar = ["tar", "--null", "--no-recursion", "-T", LIST_FILE, "-cpf", "-"]
                await run_collect(client, tar, sink, what)
                with contextlib.suppress(AgentError):
                    await client.remove(LIST_FILE, False)
            sink.flush()
            os.fsync(sink.fileno())

    # ------------------------------------------------------------------------- restore
    async def restore(self, name: str, request: CreateRequest) -> SandboxRecord:
        """A new sandbox from a snapshot. A memory snapshot keeps its resources (its processes
        were sized for them); cpu may be changed, and metadata, ttl and lifecycle options apply."""
        snapshot = self.get(name)
        if snapshot.kind == "fs":
            request.template = snapshot.template
            request.env = {**snapshot.env, **request.env}
            request.memory_mib = request.memory_mib or snapshot.memory_mib
            request.disk_mib = request.disk_mib or snapshot.disk_mib
            record = await self.sb.create(request)
            try:
                await self._apply_files(record, Path(snapshot.image_path))
            except BaseException:
                await self.sb.kill(record.id)
                raise
            return self.sb.get(record.id)
        request.template = snapshot.template
        if request.memory_mib not in (None, snapshot.memory_mib):
            raise InvalidRequest(
                f"snapshot {name!r} holds a memory image of a {snapshot.memory_mib} MiB sandbox; "
                "its memory cannot be changed"
            )
        request.memory_mib = snapshot.memory_mib
        request.disk_mib = request.disk_mib or snapshot.disk_mib
        request.cpu = request.cpu or snapshot.cpu
        if request.secret_env:
            raise InvalidRequest("secret env cannot be given to a sandbox restored from memory")
        cpu, memory, disk, expires = self.sb.resolve(request)
        record = self.sb.new_record(
            request,
            snapshot.template,
            (cpu, memory, disk),
            expires,
            env={**snapshot.env, **request.env},
            operation="restoring",
            parent_id=snapshot.source_id,
        )
        template = self.sb.templates.get(snapshot.template)
        return await self.sb.launch(
            record,
            template,
            image=snapshot.image or template.image,
            env=record.env,
            image_dir=Path(snapshot.image_path),
            configure=bool(request.env),
        )

    async def _apply_files(self, record: SandboxRecord, image: Path) -> None:
        client = self.sb.agent(record.id, "restore files into")
        what = f"restoring files into sandbox {record.id}"
        archive = image / FS_ARCHIVE
        if archive.stat().st_size:
            await client.write_file(RESTORE_TAR, _read_chunks(archive), mode=0o600, parents=True)
            await run_collect(
                client,
                ["/bin/sh", "-c", f"tar -C / -xpf {RESTORE_TAR} && rm -f {RESTORE_TAR}"],
                _Collector(),
                what,
            )
        for path in json.loads((image / FS_DELETED).read_text()):
            with contextlib.suppress(AgentError):
                await client.remove(os.fsdecode(base64.b64decode(path)), True)


class _Collector:
    def __init__(self) -> None:
        self.data = b""

    def write(self, chunk: bytes) -> None:
        self.data += chunk


async def _read_chunks(path: Path, size: int = 1 << 20) -> Any:
    with open(path, "rb") as handle:
        while chunk := await asyncio.to_thread(handle.read, size):
            yield chunk


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def _changed_paths(rootfs: Path, entries: list[bytes]) -> tuple[list[bytes], set[bytes]]:
    """From ``find -printf '%y %s %T@ %p'`` lines: the paths that differ from the image (new,
    another type, size or mtime; new directories too), and every path present."""
    root = os.fsencode(rootfs)
    changed: list[bytes] = []
    present: set[bytes] = set()
    kinds = {"d": stat.S_ISDIR, "f": stat.S_ISREG, "l": stat.S_ISLNK}
    for entry in entries:
        kind, size, mtime, path = entry.split(b" ", 3)
        present.add(path)
        try:
            st = os.lstat(root + path)
        except OSError:
            changed.append(path)
            continue
        same_kind = kinds.get(kind.decode(), lambda _mode: False)(st.st_mode)
        differs = kind != b"d" and (
            int(size) != st.st_size or int(float(mtime)) != int(st.st_mtime)
        )
        if not same_kind or differs:
            changed.append(path)
    return changed, present


def _deleted_paths(rootfs: Path, present: set[bytes]) -> list[str]:
    """Image paths missing in the sandbox (base64 of the raw bytes), parents before children."""
    root = os.fsencode(rootfs)
    deleted: list[str] = []
    pruned = tuple(os.fsencode(p) for p in PRUNE)
    for directory, dirs, files in os.walk(root):
        rel_dir = directory[len(root) :] or b"/"
        if rel_dir.startswith(pruned):
            dirs[:] = []
            continue
        kept = []
        for name in dirs:
            path = os.path.join(rel_dir, name)
            if path in present:
                kept.append(name)
            elif not path.startswith(pruned):
                deleted.append(base64.b64encode(path).decode())
        dirs[:] = kept
        for name in files:
            path = os.path.join(rel_dir, name)
            if path not in present:
                deleted.append(base64.b64encode(path).decode())
    return deleted
