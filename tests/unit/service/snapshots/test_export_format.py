"""The export reader takes nothing on trust: hostile archives and manifests are refused before
anything is written outside the target dir."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from corral.service.errors import InvalidRequest
from corral.service.snapshots.export_format import (
    MAX_FILES,
    ExportReader,
    FileEntry,
    build_manifest,
    parse_manifest,
    write_export,
)

RECORD = {
    "template": "base",
    "cpu": 1.0,
    "memory_mib": 256,
    "disk_mib": 2048,
    "created_at": 1.0,
}


def manifest_for(image: dict[str, bytes], **extra: Any) -> bytes:
    listed = {
        n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in image.items()
    }
    body = {"format": 2, "kind": "sandbox", "record": RECORD, "files": listed, "exported_at": 1.0}
    return json.dumps({**body, **extra}).encode()


def archive(
    members: Sequence[tarfile.TarInfo | tuple[str, bytes]], fmt: int = tarfile.USTAR_FORMAT
) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))
    out.seek(0)
    return out


def extract(data: io.BytesIO, target: Path) -> None:
    reader = ExportReader(data)
    reader.open()
    manifest = parse_manifest(reader.manifest_bytes)
    reader.extract(target, dict(manifest.files), set(manifest.files))


def head(files: dict[str, bytes]) -> list[tarfile.TarInfo | tuple[str, bytes]]:
    return [("corral-export.json", manifest_for(files)), ("corral-export.sig", b"{}")]


def test_round_trip(tmp_path: Path) -> None:
    image = tmp_path / "image"
    image.mkdir()
    (image / "checkpoint.img").write_bytes(b"memory" * 1000)
    files = sorted(image.iterdir())
    manifest = build_manifest(files, "sandbox", RECORD)
    out = io.BytesIO()
    write_export(out, manifest, {"key": "k", "signature": "s"}, files)
    out.seek(0)
    target = tmp_path / "target"
    target.mkdir()
    reader = ExportReader(out)
    reader.open()
    assert reader.manifest_bytes == manifest and reader.signature["key"] == "k"
    parsed = parse_manifest(manifest)
    reader.extract(target, dict(parsed.files), set(parsed.files))
    assert (target / "checkpoint.img").read_bytes() == b"memory" * 1000


def hostile_member(kind: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo("image/checkpoint.img")
    if kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
    elif kind == "hardlink":
        info.type, info.linkname = tarfile.LNKTYPE, "/etc/shadow"
    elif kind == "device":
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    elif kind == "directory":
        info.type = tarfile.DIRTYPE
    elif kind == "fifo":
        info.type = tarfile.FIFOTYPE
    return info


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "device", "directory", "fifo"])
def test_links_devices_and_directories_are_refused(tmp_path: Path, kind: str) -> None:
    data = archive([*head({"checkpoint.img": b""}), hostile_member(kind)])
    with pytest.raises(InvalidRequest, match="only regular files"):
        extract(data, tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_extended_headers_are_refused(tmp_path: Path, fmt: int) -> None:
    long_name = "image/" + "a" * 200
    data = archive([*head({"a" * 200: b"x"}), (long_name, b"x")], fmt=fmt)
    with pytest.raises(InvalidRequest):
        extract(data, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_names_that_climb_out_are_refused_by_the_schema(tmp_path: Path) -> None:
    files = {"../../escape": b"x"}
    data = archive([*head(files), ("image/../../escape", b"x")])
    with pytest.raises(InvalidRequest, match="manifest is not valid"):
        extract(data, tmp_path)
    assert not (tmp_path.parent / "escape").exists()


def test_unlisted_duplicate_and_resized_members_are_refused(tmp_path: Path) -> None:
    files = {"checkpoint.img": b"abc"}
    with pytest.raises(InvalidRequest, match="not listed"):
        extract(archive([*head(files), ("image/other.img", b"abc")]), tmp_path / "a")
    (tmp_path / "b").mkdir()
    dup = [*head(files), ("image/checkpoint.img", b"abc"), ("image/checkpoint.img", b"abc")]
    with pytest.raises(InvalidRequest, match="twice"):
        extract(archive(dup), tmp_path / "b")
    (tmp_path / "c").mkdir()
    with pytest.raises(InvalidRequest, match="the manifest says"):
        extract(archive([*head(files), ("image/checkpoint.img", b"abcd")]), tmp_path / "c")
    (tmp_path / "d").mkdir()
    with pytest.raises(InvalidRequest, match="checksum mismatch"):
        extract(archive([*head(files), ("image/checkpoint.img", b"abd")]), tmp_path / "d")
    (tmp_path / "e").mkdir()
    with pytest.raises(InvalidRequest, match=r"missing checkpoint\.img"):
        extract(archive(head(files)), tmp_path / "e")


def test_member_count_is_bounded(tmp_path: Path) -> None:
    files = {f"f{i}": b"" for i in range(MAX_FILES)}
    members = [*head(files)] + [(f"image/f{i}", b"") for i in range(MAX_FILES + 5)]
    with pytest.raises(InvalidRequest):
        extract(archive(members), tmp_path)


def test_oversized_manifest_and_truncation_are_refused(tmp_path: Path) -> None:
    huge = [("corral-export.json", b" " * (2 << 20)), ("corral-export.sig", b"{}")]
    with pytest.raises(InvalidRequest, match="more than"):
        extract(archive(huge), tmp_path)
    whole = archive([*head({"checkpoint.img": b"x" * 5000}), ("image/checkpoint.img", b"x" * 5000)])
    cut = io.BytesIO(whole.getvalue()[:3000])
    with pytest.raises(InvalidRequest, match="damaged or truncated"):
        extract(cut, tmp_path)


def test_a_damaged_header_is_refused(tmp_path: Path) -> None:
    raw = bytearray(archive(head({"checkpoint.img": b""})).getvalue())
    raw[10] ^= 0x01  # inside the first member's name: the header checksum no longer matches
    with pytest.raises(InvalidRequest, match="checksum"):
        extract(io.BytesIO(bytes(raw)), tmp_path)


@pytest.mark.parametrize(
    ("extra", "expect"),
    [
        ({"format": 1}, "unsupported corral export"),
        ({"kind": "volume"}, "manifest.kind"),
        ({"files": {}}, "manifest.files"),
        ({"signer_path": "/etc"}, "Extra inputs"),
    ],
)
def test_manifest_schema(extra: dict[str, Any], expect: str) -> None:
    with pytest.raises(InvalidRequest, match=expect):
        parse_manifest(manifest_for({"checkpoint.img": b""}, **extra))


def test_record_schema_forbids_ids_paths_and_states() -> None:
    for field, value in [("id", "sb-/../../etc"), ("image_path", "/etc"), ("state", "running")]:
        manifest = parse_manifest(manifest_for({"a": b""}, record={**RECORD, field: value}))
        with pytest.raises(InvalidRequest, match=f"record.{field}: Extra inputs"):
            manifest.sandbox()


def test_file_entries_are_strict() -> None:
    with pytest.raises(ValueError):
        FileEntry.model_validate({"size": -1, "sha256": "0" * 64})
    with pytest.raises(ValueError):
        FileEntry.model_validate({"size": 1, "sha256": "XYZ"})
