"""``inside`` confines every path the daemon derives; ``seal_image`` never replaces anything
outside its root."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.paths import PathEscape, inside
from corral.service.images import seal_image


def test_inside_accepts_paths_below_the_root(tmp_path: Path) -> None:
    assert inside(tmp_path, "sb-abc") == tmp_path.resolve() / "sb-abc"
    assert inside(tmp_path, tmp_path / "a" / "b") == tmp_path.resolve() / "a" / "b"


@pytest.mark.parametrize("evil", ["..", "../x", "sb-/../../x", "/etc", ".", ""])
def test_inside_refuses_escapes_and_the_root_itself(tmp_path: Path, evil: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(PathEscape):
        inside(root, evil)


def test_inside_resolves_symlinks(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)
    with pytest.raises(PathEscape):
        inside(root, "link/victim")


def test_seal_image_never_replaces_a_directory_outside_its_root(tmp_path: Path) -> None:
    root, canary = tmp_path / "parked", tmp_path / "canary"
    root.mkdir()
    canary.mkdir()
    (canary / "keep").write_text("host file")
    partial = root / "x.partial"
    partial.mkdir()
    depth = "../" * (len(root.resolve().parts) + 1)
    final = root / ("sb-/" + depth + str(canary).lstrip("/"))
    assert final.resolve() == canary.resolve()
    with pytest.raises(PathEscape):
        seal_image(partial, final, root=root)
    assert (canary / "keep").read_text() == "host file"
    assert sorted(p.name for p in canary.iterdir()) == ["keep"]
