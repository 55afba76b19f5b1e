"""A sandbox whose root is writable on the host: its writes and deletions land in the host
overlay's upper dir (how template builds make a new layer)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from corral.images.mounts import mount_overlay, unmount
from corral.runtime import GVisorRuntime

from .conftest import ROOTFS, SpecFactory, wait_for_log

pytestmark = pytest.mark.integration

WRITER = """
import os
os.makedirs('/built/dir', exist_ok=True)
open('/built/dir/file', 'w').write('from the sandbox')
os.unlink('/etc/hostname')
print('wrote', flush=True)
"""


async def test_writes_land_in_the_upper_dir(
    runtime: GVisorRuntime, make_spec: SpecFactory, tmp_path: Path
) -> None:
    (tmp_path / "upper").mkdir()
    (tmp_path / "work").mkdir()
    merged = tmp_path / "root"
    mount_overlay(
        merged,
        layers_dir=tmp_path,
        lower=[str(ROOTFS)],
        upper=tmp_path / "upper",
        work=tmp_path / "work",
    )
    try:
        spec = make_spec(WRITER)
        spec = type(spec)(**{**spec.__dict__, "rootfs": merged, "writable_root": True})
        await runtime.start(spec)
        await wait_for_log(runtime.paths(spec.sandbox_id).console_log, r"^wrote$")
        await runtime.destroy(spec.sandbox_id)
    finally:
        unmount(merged, busy_wait=5.0)
        subprocess.run(["rmdir", str(merged)], check=False)
    upper = tmp_path / "upper"
    assert (upper / "built/dir/file").read_text() == "from the sandbox"
    whiteout = os.lstat(upper / "etc/hostname")
    assert stat.S_ISCHR(whiteout.st_mode) and whiteout.st_rdev == 0
    assert (ROOTFS / "etc/hostname").exists()  # the lower layer is untouched
