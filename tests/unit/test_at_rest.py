"""The data dir's modes at rest: made private at first start, corrected at every start."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from corral.at_rest import make_private_dir, secure_data_dir


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_new_data_dir_is_private(tmp_path: Path) -> None:
    data = make_private_dir(tmp_path / "a" / "data")
    assert mode(data) == 0o700


def test_an_old_data_dirs_modes_are_corrected_but_image_content_is_left(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for d in ("store/images", "store/layers/l1/usr/bin", "parked/sb-1", "snapshots/s/img"):
        (data / d).mkdir(parents=True)
    files = {
        "corral.db": 0o644,
        "admin.key": 0o644,
        "parked/sb-1/pages.img": 0o644,
        "snapshots/s/img/checkpoint.img": 0o666,
        "store/images/m.json": 0o644,
        "store/layers/l1/usr/bin/tool": 0o755,
    }
    for name, bits in files.items():
        (data / name).write_text("x")
        os.chmod(data / name, bits)
    for dirpath, _, _ in os.walk(data):
        os.chmod(dirpath, 0o755)
    (data / "parked" / "link").symlink_to("/etc/passwd")

    secure_data_dir(data)

    assert mode(data) == 0o700
    for d in ("store", "parked", "snapshots", "parked/sb-1", "snapshots/s/img", "store/images"):
        assert mode(data / d) == 0o700, d
    for name in ("corral.db", "admin.key", "parked/sb-1/pages.img", "store/images/m.json"):
        assert mode(data / name) == 0o600, name
    assert mode(data / "snapshots/s/img/checkpoint.img") == 0o600
    # A layer's content is what sandboxes see: untouched (its 0700 parent fences it off).
    assert mode(data / "store/layers/l1/usr/bin/tool") == 0o755
    assert mode(data / "store/layers/l1/usr/bin") == 0o755
    assert mode(Path("/etc/passwd")) == 0o644  # a symlink is never followed
