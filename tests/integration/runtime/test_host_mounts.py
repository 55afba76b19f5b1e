"""The runtime's host mounts by system call (``runtime/host_mounts.py``): a loop-mounted ext4 disk
and a tmpfs come and go leaving no loop device or mount behind, also when the mount fails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from corral.runtime.host_mounts import (
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MountFailure,
    mount_loop_ext4,
    mount_tmpfs,
    unmount,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root"),
]


def loops_of(image: Path) -> list[str]:
    listed = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return [line for line in listed.splitlines() if str(image) in line]


def test_a_loop_disk_mounts_holds_files_and_leaves_no_loop_device(tmp_path: Path) -> None:
    image, target = tmp_path / "disk.img", tmp_path / "disk"
    target.mkdir()
    with open(image, "wb") as fh:
        fh.truncate(32 * 1024 * 1024)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    mount_loop_ext4(image, target)
    try:
        assert os.path.ismount(target)
        assert len(loops_of(image)) == 1
        (target / "f").write_text("kept")
    finally:
        unmount(target)
    assert not os.path.ismount(target)
    assert loops_of(image) == []  # autoclear: the kernel freed it at the unmount
    mount_loop_ext4(image, target)  # and the file system is whole
    try:
        assert (target / "f").read_text() == "kept"
    finally:
        unmount(target)


def test_a_failed_loop_mount_leaves_no_loop_device(tmp_path: Path) -> None:
    image, target = tmp_path / "not-ext4.img", tmp_path / "disk"
    target.mkdir()
    image.write_bytes(b"\0" * 1024 * 1024)
    with pytest.raises(MountFailure, match="mounting ext4 on"):
        mount_loop_ext4(image, target)
    assert not os.path.ismount(target)
    assert loops_of(image) == []


def test_a_tmpfs_is_bounded_and_unmounted(tmp_path: Path) -> None:
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    mount_tmpfs(tmp_path, name="corral-test", flags=flags, options="size=64k,mode=0700")
    try:
        assert os.path.ismount(tmp_path)
        with pytest.raises(OSError), open(tmp_path / "big", "wb") as fh:
            fh.write(b"x" * 128 * 1024)
            fh.flush()
    finally:
        unmount(tmp_path)
    assert not os.path.ismount(tmp_path)
    with pytest.raises(MountFailure, match="unmounting"):
        unmount(tmp_path)
