"""The content-addressed store on a fake mounter: layer sharing, manifests, views and GC."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.images import ImageStore
from corral.images.cas import ContentStore, ImageConfig, ImageManifest, layer_digest


class FakeMounter:
    def __init__(self) -> None:
        self.mounted: dict[Path, list[str]] = {}

    def mount(self, target: Path, *, layers_dir: Path, lower: list[str]) -> None:
        target.mkdir(parents=True, exist_ok=True)
        self.mounted[target] = lower

    def unmount(self, target: Path) -> None:
        self.mounted.pop(target, None)

    def is_mounted(self, target: Path) -> bool:
        return target in self.mounted


@pytest.fixture
def store(tmp_path: Path) -> ContentStore:
    s = ContentStore(tmp_path / "store", ImageStore(tmp_path / "images"), FakeMounter())
    s.open()
    return s


def layer(store: ContentStore, files: dict[str, str]) -> str:
    work = store.work_dir("t-")
    for name, text in files.items():
        (work / name).write_text(text)
    digest = layer_digest(work)
    store.add_layer(digest, work)
    return digest


def test_same_content_is_one_layer_shared_by_two_images(store: ContentStore) -> None:
    a = layer(store, {"a": "1"})
    again = layer(store, {"a": "1"})
    b = layer(store, {"b": "2"})
    assert a == again
    assert sorted(p.name for p in store.layers_dir.iterdir()) == sorted([a[7:], b[7:]])
    one = store.put_image(ImageManifest((a,), ImageConfig(env={"X": "1"})))
    two = store.put_image(ImageManifest((a, b), ImageConfig()))
    assert one != two and one.startswith("sha256:")
    assert store.put_image(ImageManifest((a,), ImageConfig(env={"X": "1"}))) == one
    assert store.get_image(two) == ImageManifest((a, b), ImageConfig())


def test_view_mounts_layers_top_first_and_gc_keeps_what_is_used(store: ContentStore) -> None:
    mounter = store.mounter
    assert isinstance(mounter, FakeMounter)
    a = layer(store, {"a": "1"})
    b = layer(store, {"b": "2"})
    c = layer(store, {"c": "3"})
    keep = store.put_image(ImageManifest((a, b), ImageConfig()))
    drop = store.put_image(ImageManifest((a, c), ImageConfig()))
    view = store.rootfs(drop)
    assert mounter.mounted[view] == [c[7:], a[7:]]

    images, layers = store.gc({keep})
    assert images == [drop] and layers == [c]
    assert view not in mounter.mounted
    assert store.get_image(drop) is None and store.get_image(keep) is not None
    assert store.has_layer(a) and store.has_layer(b) and not store.has_layer(c)


def test_missing_layers_cannot_make_an_image_and_open_clears_work(store: ContentStore) -> None:
    with pytest.raises(FileNotFoundError):
        store.put_image(ImageManifest(("sha256:" + "0" * 64,), ImageConfig()))
    leftover = store.work_dir(".build-")
    (leftover / "half").write_text("x")
    store.open()
    assert not leftover.exists()


def test_oci_config_becomes_image_config() -> None:
    config = ImageConfig.from_oci(
        {"Env": ["PATH=/bin", "A=b=c"], "WorkingDir": "/w", "User": "1000", "Cmd": ["sh"]}
    )
    assert config == ImageConfig(
        env={"PATH": "/bin", "A": "b=c"}, workdir="/w", user="1000", cmd=["sh"]
    )
