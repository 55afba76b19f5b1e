"""Finding an image's rootfs in any mount namespace's mountinfo (a fake /proc)."""

from __future__ import annotations

from pathlib import Path

from corral.images.in_use import mounted_anywhere

ROOTFS = "/var/lib/corral/images/base/rootfs"
OVERLAY = (
    "377 373 0:41 / / rw,relatime - overlay overlay rw,lowerdir=/data/store/stub/6037:{lower},"
    "upperdir=/data/tmp/upper,workdir=/data/tmp/work,uuid=on"
)
BIND = "210 206 254:0 {root} / ro,nosuid,nodev,relatime - ext4 /dev/vda rw,discard"
PLAIN = "25 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard"


def fake_proc(tmp_path: Path, *namespaces: list[str]) -> Path:
    for pid, lines in enumerate(namespaces, start=1):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "mountinfo").write_text("\n".join(lines) + "\n")
    (tmp_path / "self").mkdir()  # not a process: skipped
    return tmp_path


def test_an_overlay_lower_layer_or_a_bind_mount_is_a_use(tmp_path: Path) -> None:
    for name in "abc":
        (tmp_path / name).mkdir()
    as_lower = fake_proc(tmp_path / "a", [PLAIN], [PLAIN, OVERLAY.format(lower=ROOTFS)])
    assert mounted_anywhere(Path(ROOTFS), proc=as_lower)
    as_bind = fake_proc(tmp_path / "b", [PLAIN, BIND.format(root=ROOTFS)])
    assert mounted_anywhere(Path(ROOTFS), proc=as_bind)
    below = fake_proc(tmp_path / "c", [BIND.format(root=ROOTFS + "/usr")])
    assert mounted_anywhere(Path(ROOTFS + "/"), proc=below)


def test_other_paths_are_not_a_use(tmp_path: Path) -> None:
    other = ROOTFS.replace("base", "base2")
    proc = fake_proc(
        tmp_path, [PLAIN, OVERLAY.format(lower=other), BIND.format(root=other)], ["garbage"]
    )
    assert not mounted_anywhere(Path(ROOTFS), proc=proc)


def test_this_hosts_own_root_is_mounted() -> None:
    assert mounted_anywhere(Path("/"))
