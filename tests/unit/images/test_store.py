"""The base image recipe: an image built from it is kept, one from another recipe is rebuilt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.images import store
from corral.images.store import ImageBuildError, ImageStore, base_recipe


def fake_image(images: Path, recipe: str | None) -> Path:
    (images / "base" / "rootfs" / "tmp").mkdir(parents=True)
    meta = {"name": "base", **({"recipe": recipe} if recipe else {})}
    (images / "base" / "image.json").write_text(json.dumps(meta))
    return images / "base" / "rootfs"


def test_an_image_of_the_current_recipe_is_kept(tmp_path: Path) -> None:
    rootfs = fake_image(tmp_path, base_recipe())
    assert ImageStore(tmp_path).build_base("base", progress=lambda m: None) == rootfs


def test_an_image_of_an_older_recipe_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_image(tmp_path, None)  # built before recipes were stamped
    monkeypatch.setattr(store.shutil, "which", lambda name: None)
    with pytest.raises(ImageBuildError, match="debootstrap is not installed"):
        ImageStore(tmp_path).build_base("base", progress=lambda m: None)


def test_recipe_has_the_complete_python_and_tools() -> None:
    assert {"python3", "ca-certificates", "curl", "procps", "less"} <= set(store.BASE_PACKAGES)
    assert "python3-minimal" not in store.BASE_PACKAGES


def test_trim_drops_docs_but_keeps_copyrights(tmp_path: Path) -> None:
    doc = tmp_path / "usr/share/doc/curl"
    doc.mkdir(parents=True)
    (doc / "copyright").write_text("licence")
    (doc / "changelog.gz").write_text("x")
    (tmp_path / "usr/share/man/man1").mkdir(parents=True)
    (tmp_path / "usr/share/man/man1/curl.1.gz").write_text("x")
    store._trim(tmp_path)
    assert sorted(p.name for p in doc.iterdir()) == ["copyright"]
    assert not any((tmp_path / "usr/share/man").iterdir())
    excludes = (tmp_path / "etc/dpkg/dpkg.cfg.d/corral-nodoc").read_text()
    assert "path-exclude=/usr/share/doc/*" in excludes


@pytest.mark.parametrize("in_use", [True, False])
def test_a_replaced_image_is_kept_while_sandboxes_run_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_use: bool
) -> None:
    # Another checkout's scripts/setup with a newer recipe must not delete the files under a
    # running daemon's sandboxes: the older image is moved aside and kept while it is mounted.
    rootfs = fake_image(tmp_path, None)
    (rootfs / "tmp" / "file").write_text("still here")
    asked: list[Path] = []

    def mounted_anywhere(path: Path) -> bool:
        asked.append(path)
        return in_use

    monkeypatch.setattr(store, "mounted_anywhere", mounted_anywhere)
    said: list[str] = []
    ImageStore(tmp_path)._retire("base", said.append)
    assert asked == [rootfs] and not (tmp_path / "base").exists()
    kept = list(tmp_path.glob(".retired-base-*/base/rootfs/tmp/file"))
    if in_use:
        assert [p.read_text() for p in kept] == ["still here"]
        assert "in use by running sandboxes" in said[0]
    else:
        assert kept == [] and list(tmp_path.iterdir()) == [] and said == []
