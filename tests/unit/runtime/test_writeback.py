"""Early writeback of an image being written: the tree ends as written, the thread is gone once
the body ends (also when it fails), and a directory that does not exist yet is fine."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from corral.runtime.writeback import writing_back


def writeback_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "writeback"]


async def test_files_written_meanwhile_end_as_written(tmp_path: Path) -> None:
    image = tmp_path / "image.partial"  # made inside the body, as a checkpoint does
    async with writing_back(image, interval=0.001):
        image.mkdir()
        for i in range(5):
            (image / f"pages-{i}.img").write_bytes(bytes([i]) * 100_000)
            (image / "sub").mkdir(exist_ok=True)
            (image / "sub" / "meta").write_text(str(i))
    assert [(image / f"pages-{i}.img").read_bytes() for i in range(5)] == [
        bytes([i]) * 100_000 for i in range(5)
    ]
    assert (image / "sub" / "meta").read_text() == "4"
    assert writeback_threads() == []


async def test_the_thread_stops_when_the_body_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="checkpoint failed"):
        async with writing_back(tmp_path, interval=0.001):
            (tmp_path / "checkpoint.img").write_bytes(b"x")
            raise RuntimeError("checkpoint failed")
    assert writeback_threads() == []
