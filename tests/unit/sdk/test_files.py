"""files: streamed upload and download, listing and management."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.sdk import NotFound, Sandbox
from corral.sdk.testing import FakeDaemon


@pytest.fixture
def fake() -> FakeDaemon:
    return FakeDaemon()


@pytest.fixture
def sbx(fake: FakeDaemon) -> Iterator[Sandbox]:
    with Sandbox.create(api_key=fake.api_key, transport=fake.transport) as sandbox:
        yield sandbox


def _puts(fake: FakeDaemon) -> list:  # type: ignore[type-arg]
    return [r for r in fake.requests if r.method == "PUT"]


def test_write_and_read_bytes_and_text(fake: FakeDaemon, sbx: Sandbox) -> None:
    written = sbx.files.write("/work/a.txt", "héllo", mode=0o600)
    assert (written.path, written.size) == ("/work/a.txt", 6)
    request = _puts(fake)[-1]
    assert request.url.params["mode"] == "384"
    assert request.url.params["parents"] == "true"
    assert sbx.files.read("/work/a.txt") == "héllo".encode()
    assert sbx.files.read_text("/work/a.txt") == "héllo"


def test_write_from_an_iterator_streams_chunked(fake: FakeDaemon, sbx: Sandbox) -> None:
    sbx.files.write("/big", (bytes([i]) * 1000 for i in range(5)))
    request = _puts(fake)[-1]
    assert request.headers.get("transfer-encoding") == "chunked"
    assert len(fake.files[sbx.id]["/big"]) == 5000


def test_upload_and_download_a_local_file(fake: FakeDaemon, sbx: Sandbox, tmp_path: Path) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(b"\x00\x01" * 300_000)
    sbx.files.upload(source, "/data/blob")
    assert _puts(fake)[-1].headers["content-length"] == str(600_000)
    target = tmp_path / "copy.bin"
    assert sbx.files.download("/data/blob", target) == 600_000
    assert target.read_bytes() == source.read_bytes()
    chunks = list(sbx.files.stream("/data/blob"))
    assert len(chunks) > 1  # it arrived in pieces, not as one buffer
    assert b"".join(chunks) == source.read_bytes()


def test_list_stat_exists_mkdir_move_remove(sbx: Sandbox) -> None:
    sbx.files.write("/d/one", b"1")
    sbx.files.write("/d/sub/two", b"22")
    names = {(entry.name, entry.type) for entry in sbx.files.list("/d")}
    assert names == {("one", "file"), ("sub", "dir")}
    assert sbx.files.stat("/d/one").size == 1
    assert sbx.files.exists("/d/one")
    assert not sbx.files.exists("/nope")
    assert sbx.files.mkdir("/e") is True
    moved = sbx.files.move("/d/one", "/d/uno")
    assert moved.path == "/d/uno"
    sbx.files.remove("/d/uno")
    with pytest.raises(NotFound):
        sbx.files.read("/d/uno")
