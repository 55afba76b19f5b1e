"""The export file format: its manifest schema, the writer and a bounded, strict reader.

An export is an uncompressed POSIX ustar archive holding, in this order::

    corral-export.json   the manifest (``Manifest``): format, kind, the record, every file's
                         size and SHA-256
    corral-export.sig    ``{"key": "ed25519:...", "signature": "..."}``: the exporter's
                         signature over the manifest's exact bytes (see ``service.trust``)
    image/<NAME>         the image files, flat (no directories), each listed in the manifest

The reader trusts nothing in the file: it parses ustar headers itself (no pax or GNU
extensions, no links, devices, directories or prefixes; only regular members with short flat
names), caps the number and size of members, and checks every file's size and SHA-256 while it
writes it. The manifest's record is validated against a schema that forbids unknown fields, so no
path, id or state of the exporter ever reaches the importing daemon; it derives those itself.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from corral.paths import inside
from corral.service.errors import InvalidRequest

__all__ = [
    "FORMAT",
    "ExportReader",
    "FileEntry",
    "Manifest",
    "SandboxFields",
    "SnapshotFields",
    "build_manifest",
    "describe",
    "image_files",
    "parse_manifest",
    "write_export",
]

FORMAT = 2
MANIFEST = "corral-export.json"
SIGNATURE = "corral-export.sig"
IMAGE_PREFIX = "image/"
CHUNK = 1 << 20
BLOCK = 512
MAX_MANIFEST_BYTES = 1 << 20
MAX_SIGNATURE_BYTES = 4096
MAX_FILES = 64
MAX_FILE_BYTES = 1 << 40

FileName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")]
TemplateName = Annotated[
    str,
    StringConstraints(
        max_length=129,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}(:[A-Za-z0-9][A-Za-z0-9._-]{0,63})?$",
    ),
]
EnvName = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^=\x00]+$")]
EnvValue = Annotated[str, StringConstraints(max_length=32768, pattern=r"^[^\x00]*$")]
MetaKey = Annotated[str, StringConstraints(min_length=1, max_length=128)]
MetaValue = Annotated[str, StringConstraints(max_length=2048)]
Timestamp = Annotated[float, Field(ge=0, le=1e11)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class FileEntry(_Strict):
    size: Annotated[int, Field(ge=0, le=MAX_FILE_BYTES)]
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class SandboxFields(_Strict):
    """What a parked sandbox's export says of it. Its id, state and paths are the importer's."""

    template: TemplateName
    cpu: Annotated[float, Field(gt=0, le=1024)]
    memory_mib: Annotated[int, Field(ge=1, le=1 << 22)]
    disk_mib: Annotated[int, Field(ge=1, le=1 << 26)]
    env: Annotated[dict[EnvName, EnvValue], Field(max_length=256)] = {}
    metadata: Annotated[dict[MetaKey, MetaValue], Field(max_length=128)] = {}
    created_at: Timestamp


class SnapshotFields(_Strict):
    """What a snapshot's export says of it. ``image`` names the image its source ran on."""

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    kind: Literal["memory", "fs"]
    source_id: Annotated[str, StringConstraints(pattern=r"^sb-[A-Za-z0-9]{1,29}$")]
    template: TemplateName
    cpu: Annotated[float, Field(gt=0, le=1024)]
    memory_mib: Annotated[int, Field(ge=1, le=1 << 22)]
    disk_mib: Annotated[int, Field(ge=1, le=1 << 26)]
    env: Annotated[dict[EnvName, EnvValue], Field(max_length=256)] = {}
    created_at: Timestamp
    image: (
        Annotated[
            str,
            StringConstraints(pattern=r"^(sha256:[0-9a-f]{64}|[A-Za-z0-9][A-Za-z0-9._-]{0,63})$"),
        ]
        | None
    ) = None


class Manifest(_Strict):
    format: Literal[2]
    kind: Literal["sandbox", "snapshot"]
    record: dict[str, Any]
    files: Annotated[dict[FileName, FileEntry], Field(min_length=1, max_length=MAX_FILES)]
    exported_at: Timestamp

    def sandbox(self) -> SandboxFields:
        return _validated(SandboxFields, self.record, "record")

    def snapshot(self) -> SnapshotFields:
        return _validated(SnapshotFields, self.record, "record")


def describe(exc: ValidationError, where: str) -> str:
    parts = []
    for error in exc.errors()[:8]:
        loc = ".".join(str(p) for p in (where, *error.get("loc", ())))
        parts.append(f"{loc}: {error.get('msg')}")
    return "; ".join(parts)


_M = TypeVar("_M", bound=BaseModel)


def _validated(model: type[_M], data: Any, where: str) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequest(f"the export's manifest is not valid: {describe(exc, where)}") from exc


def parse_manifest(data: bytes) -> Manifest:
    try:
        return Manifest.model_validate_json(data)
    except ValidationError as exc:
        locs = [error.get("loc", ()) for error in exc.errors()]
        if any(loc[:1] == ("format",) for loc in locs):
            raise InvalidRequest(
                "unsupported corral export: this daemon reads format 2 (signed); export it again "
                "with this version of corral"
            ) from exc
        raise InvalidRequest(
            f"the export's manifest is not valid: {describe(exc, 'manifest')}"
        ) from exc


# ------------------------------------------------------------------------------- writing
def _sha256(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def image_files(image: Path, skip: Iterable[str] = ()) -> list[Path]:
    """The image's files to export: regular files directly in ``image`` (what runsc and the
    snapshotter write), without the ones in ``skip`` (the seal marker)."""
    skipped = set(skip)
    return sorted(
        p for p in image.iterdir() if p.is_file() and not p.is_symlink() and p.name not in skipped
    )


def build_manifest(files: list[Path], kind: str, record: dict[str, Any]) -> bytes:
    entries = {}
    for path in files:
        size, digest = _sha256(path)
        entries[path.name] = {"size": size, "sha256": digest}
    manifest = {
        "format": FORMAT,
        "kind": kind,
        "record": record,
        "files": entries,
        "exported_at": time.time(),
    }
    return _canonical(manifest)


def _canonical(value: Any) -> bytes:
    return json.dumps(value, indent=1, sort_keys=True).encode()


def write_export(
    out: IO[bytes], manifest: bytes, signature: dict[str, str], files: list[Path]
) -> None:
    """Write the archive: manifest, signature, then the files (sizes as in the manifest)."""
    now = int(time.time())
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in ((MANIFEST, manifest), (SIGNATURE, _canonical(signature))):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), now, 0o600
            tar.addfile(info, io.BytesIO(data))
        for path in files:
            info = tarfile.TarInfo(IMAGE_PREFIX + path.name)
            info.size, info.mtime, info.mode = path.stat().st_size, now, 0o600
            with open(path, "rb") as handle:
                tar.addfile(info, handle)


# ------------------------------------------------------------------------------- reading
def _damaged(what: str) -> InvalidRequest:
    return InvalidRequest(f"the export is damaged or truncated: {what}")


def _octal(field: bytes, what: str) -> int:
    text = field.rstrip(b"\0 ").lstrip(b" ")
    if not text or any(c not in b"01234567" for c in text):
        raise _damaged(f"bad {what} in a tar header")
    return int(text, 8)


class ExportReader:
    """Reads an export archive member by member, strictly (see the module docstring).

    ``open`` reads the manifest and signature; ``extract`` then writes the image files into a
    directory the caller owns. One pass over the file; not thread-safe.
    """

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self._members = 0
        self.manifest_bytes = b""
        self.signature: dict[str, Any] = {}

    def _read(self, size: int) -> bytes:
        data = self._handle.read(size)
        if len(data) != size:
            raise _damaged("it ends in the middle of a member")
        return data

    def _next(self) -> tuple[str, int] | None:
        """The next member's name and size, or None at the end of the archive."""
        header = self._handle.read(BLOCK)
        if not header or header == bytes(BLOCK):
            return None
        if len(header) != BLOCK:
            raise _damaged("it ends in the middle of a tar header")
        self._members += 1
        if self._members > MAX_FILES + 2:
            raise InvalidRequest(f"the export has more than {MAX_FILES} files; refused")
        stored = _octal(header[148:156], "checksum")
        if sum(header[:148]) + 32 * 8 + sum(header[156:]) != stored:
            raise _damaged("a tar header's checksum does not match")
        if header[257:262] != b"ustar":
            raise InvalidRequest("unexpected member in the export: not a plain ustar header")
        if header[156:157] not in (b"0", b"\0"):
            raise InvalidRequest(
                "unexpected member in the export: only regular files are allowed (no links, "
                "devices, directories or extended headers)"
            )
        if header[345:500].strip(b"\0"):
            raise InvalidRequest("unexpected member in the export: a long (prefixed) name")
        raw_name = header[:100].split(b"\0", 1)[0]
        try:
            name = raw_name.decode("ascii")
        except UnicodeDecodeError as exc:
            raise InvalidRequest(f"unexpected member {raw_name[:60]!r} in the export") from exc
        return name, _octal(header[124:136], "size")

    def _skip_padding(self, size: int) -> None:
        pad = -size % BLOCK
        if pad:
            self._read(pad)

    def _small_member(self, expected: str, limit: int) -> bytes:
        member = self._next()
        if member is None or member[0] != expected:
            found = "nothing" if member is None else repr(member[0][:60])
            raise InvalidRequest(f"not a corral export: expected {expected}, found {found}")
        if member[1] > limit:
            raise InvalidRequest(f"{expected} is {member[1]} bytes, more than {limit}; refused")
        data = self._read(member[1])
        self._skip_padding(member[1])
        return data

    def open(self) -> None:
        self.manifest_bytes = self._small_member(MANIFEST, MAX_MANIFEST_BYTES)
        raw = self._small_member(SIGNATURE, MAX_SIGNATURE_BYTES)
        try:
            signature = json.loads(raw)
        except ValueError as exc:
            raise _damaged(f"{SIGNATURE} is not JSON") from exc
        if not isinstance(signature, dict):
            raise _damaged(f"{SIGNATURE} is not an object")
        self.signature = signature

    def extract(self, target: Path, files: dict[str, FileEntry], wanted: set[str]) -> None:
        """Write the members in ``wanted`` (a subset of ``files``) into ``target``, checking
        each against its entry; members not wanted are read and checked but not kept. Every
        file of the manifest must be present exactly once."""
        seen: set[str] = set()
        while (member := self._next()) is not None:
            name, size = member
            rel = name[len(IMAGE_PREFIX) :] if name.startswith(IMAGE_PREFIX) else None
            if rel is None or rel not in files:
                raise InvalidRequest(f"file {name[:80]!r} is not listed in the export's manifest")
            if rel in seen:
                raise InvalidRequest(f"file {rel!r} appears twice in the export")
            entry = files[rel]
            if size != entry.size:
                raise _damaged(f"{rel!r} is {size} bytes, the manifest says {entry.size}")
            seen.add(rel)
            self._copy(inside(target, rel) if rel in wanted else None, rel, entry)
        missing = sorted(set(files) - seen)
        if missing:
            raise _damaged(f"missing {', '.join(missing[:5])}")

    def _copy(self, dest: Path | None, rel: str, entry: FileEntry) -> None:
        digest = hashlib.sha256()
        out = None
        if dest is not None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            out = os.fdopen(os.open(dest, flags, 0o600), "wb")
        try:
            left = entry.size
            while left:
                chunk = self._read(min(CHUNK, left))
                left -= len(chunk)
                digest.update(chunk)
                if out is not None:
                    out.write(chunk)
            if out is not None:
                out.flush()
                os.fsync(out.fileno())
        finally:
            if out is not None:
                out.close()
        self._skip_padding(entry.size)
        if digest.hexdigest() != entry.sha256:
            raise InvalidRequest(f"checksum mismatch for {rel!r}: the export is corrupt")
