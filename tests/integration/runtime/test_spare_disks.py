"""Disks formatted ahead (``runtime/spare_disks.py``): a take after a refill gets an empty ext4
image that mounts, each spare goes to one taker only, and leftovers of an earlier run (a crash
mid-format, old spares) are never taken but cleared."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from corral.runtime.host_mounts import mount_loop_ext4, unmount
from corral.runtime.spare_disks import SpareDisks

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a disk needs root"),
]


async def refilled(spares: SpareDisks) -> None:
    spares.refill()
    assert spares._refill is not None
    await spares._refill


async def test_a_spare_taken_after_a_refill_is_an_empty_ext4_that_mounts(tmp_path: Path) -> None:
    spares = SpareDisks(tmp_path / ".spare-disks", per_size=2)
    sandbox = tmp_path / "sbx"
    sandbox.mkdir()
    assert not spares.take(sandbox / "a.img", 16)  # none yet: the boot formats its own
    await refilled(spares)
    assert len(list((tmp_path / ".spare-disks").glob("16-*.img"))) == 2
    assert spares.take(sandbox / "a.img", 16)
    assert spares.take(sandbox / "b.img", 16)
    assert not spares.take(sandbox / "c.img", 16)  # each spare went to one taker
    assert (sandbox / "a.img").stat().st_size == 16 * 1024 * 1024
    target = tmp_path / "mnt"
    target.mkdir()
    await asyncio.to_thread(mount_loop_ext4, sandbox / "a.img", target)
    try:
        assert sorted(os.listdir(target)) == ["lost+found"]
    finally:
        await asyncio.to_thread(unmount, target)
    assert not spares.take(sandbox / "d.img", 24)  # another size: remembered for the refill
    await refilled(spares)
    assert len(list((tmp_path / ".spare-disks").glob("24-*.img"))) == 2
    spares.close()


async def test_an_earlier_runs_leftovers_are_never_taken_but_cleared(tmp_path: Path) -> None:
    directory = tmp_path / ".spare-disks"
    directory.mkdir()
    (directory / "16-old.partial").write_bytes(b"half formatted")
    (directory / "16-old.img").write_bytes(b"from an earlier run")
    spares = SpareDisks(directory, per_size=1)
    assert not spares.take(tmp_path / "a.img", 16)
    assert not (tmp_path / "a.img").exists()
    await refilled(spares)
    left = sorted(p.name for p in directory.iterdir())
    assert len(left) == 1 and left[0].endswith(".img") and left[0] != "16-old.img"
    spares.close()
