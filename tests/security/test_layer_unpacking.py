"""Hostile image layers against the host boundary of layer unpacking and the layer store.

Every attack is a real tar layer crafted with ``tarfile`` and unpacked into a dir under
``tmp_path``; a canary file beside that dir (outside the layer) must come out untouched (same
bytes, mode, owner, times and link count) and nothing may appear outside the layer. Unpacking
either refuses the layer with an error naming it and the cause, or stores the member inside.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.images import ImageStore
from corral.images.cas import ContentStore, ImageConfig, ImageManifest
from corral.images.oci import ImageImportError, LayoutLayer, fetch, parse_source, read_layout
from corral.images.unpack import LayerLimits, unpack_layer


@dataclass
class Entry:
    name: str
    kind: bytes = tarfile.REGTYPE
    data: bytes = b""
    linkname: str = ""
    mode: int = 0o644
    dev: tuple[int, int] = (0, 0)


def make_layer(path: Path, entries: list[Entry]) -> LayoutLayer:
    """Write a gzip layer blob of ``entries`` (in order) at ``path``; its true digests."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type = e.kind
            info.mode = e.mode
            info.linkname = e.linkname
            info.devmajor, info.devminor = e.dev
            info.mtime = 1_000_000
            if e.kind == tarfile.REGTYPE:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
            else:
                tar.addfile(info)
    plain = buf.getvalue()
    blob = gzip.compress(plain, mtime=0)
    path.write_bytes(blob)
    return LayoutLayer(
        path,
        "sha256:" + hashlib.sha256(blob).hexdigest(),
        "sha256:" + hashlib.sha256(plain).hexdigest(),
    )


@dataclass
class Scene:
    tmp: Path
    layer_dir: Path
    canary: Path
    before: tuple[int, ...]
    outside: set[str]

    def unpack(self, entries: list[Entry], limits: LayerLimits | None = None) -> Path:
        shutil.rmtree(self.layer_dir, ignore_errors=True)  # a fresh layer dir per unpack
        layer = make_layer(self.tmp / "blob.tar.gz", entries)
        unpack_layer(
            layer.blob, self.layer_dir, digest=layer.digest, diff_id=layer.diff_id, limits=limits
        )
        return self.layer_dir

    def refused(self, entries: list[Entry], *words: str) -> None:
        with pytest.raises(ImageImportError) as info:
            self.unpack(entries)
        message = str(info.value)
        assert message.startswith("unpacking layer sha256:"), message
        for word in words:
            assert word in message, message
        assert not self.layer_dir.exists()  # a refused layer leaves nothing behind

    def assert_host_untouched(self) -> None:
        assert self.canary.read_bytes() == b"host file\n"
        assert _fingerprint(self.canary) == self.before
        now = {str(p) for p in self.tmp.rglob("*") if not _inside(p, self.layer_dir)}
        assert now - {str(self.tmp / "blob.tar.gz")} == self.outside


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _fingerprint(path: Path) -> tuple[int, ...]:
    st = os.lstat(path)
    return (st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, st.st_nlink, st.st_size)


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    outside = tmp_path / "outside"
    outside.mkdir()
    canary = outside / "canary"
    canary.write_bytes(b"host file\n")
    canary.chmod(0o644)
    (tmp_path / "real").mkdir()  # what "../real" from the layer dir's parent names
    s = Scene(tmp_path, tmp_path / "layer", canary, _fingerprint(canary), set())
    s.outside = {str(p) for p in tmp_path.rglob("*")}
    yield s
    s.assert_host_untouched()


SYM, LNK, DIR, CHR, BLK, FIFO = (
    tarfile.SYMTYPE,
    tarfile.LNKTYPE,
    tarfile.DIRTYPE,
    tarfile.CHRTYPE,
    tarfile.BLKTYPE,
    tarfile.FIFOTYPE,
)


def test_absolute_symlink_then_file_replaces_the_symlink(scene: Scene) -> None:
    root = scene.unpack(
        [
            Entry("x", SYM, linkname=str(scene.canary)),
            Entry("x", data=b"pwned\n", mode=0o777),
        ]
    )
    assert (root / "x").read_bytes() == b"pwned\n" and not (root / "x").is_symlink()


@pytest.mark.parametrize("kind", [DIR, FIFO], ids=["dir", "fifo"])
def test_symlink_then_other_member_never_chmods_through_it(scene: Scene, kind: bytes) -> None:
    root = scene.unpack(
        [Entry("x", SYM, linkname=str(scene.canary)), Entry("x", kind, mode=0o6777)]
    )
    st = os.lstat(root / "x")
    assert stat.S_IFMT(st.st_mode) == (stat.S_IFDIR if kind == DIR else stat.S_IFIFO)


def test_relative_dotdot_symlink_then_file(scene: Scene) -> None:
    up = "../" * 12 + str(scene.canary).lstrip("/")
    root = scene.unpack(
        [
            Entry("a/b", SYM, linkname=up),
            Entry("a/b", data=b"pwned\n"),
            Entry("c", SYM, linkname="../outside/canary"),
        ]
    )
    assert (root / "a/b").read_bytes() == b"pwned\n"
    assert os.readlink(root / "c") == "../outside/canary"  # stored as it is


def test_file_through_a_symlinked_dir_lands_inside_the_layer(scene: Scene) -> None:
    # Naively, <layer>/d/f is ../real/f: a file beside the layer dir.
    root = scene.unpack(
        [
            Entry("real", DIR, mode=0o755),
            Entry("d", SYM, linkname="../../../real"),
            Entry("d/f", data=b"inside\n"),
            Entry("chain2", SYM, linkname="d"),
            Entry("chain2/g", data=b"also inside\n"),
        ]
    )
    assert (root / "real/f").read_bytes() == b"inside\n"
    assert (root / "real/g").read_bytes() == b"also inside\n"
    assert not (scene.tmp / "real/f").exists()


def test_file_through_a_symlink_to_a_host_dir_is_refused(scene: Scene) -> None:
    scene.refused(
        [
            Entry("d", SYM, linkname=str(scene.canary.parent)),
            Entry("d/canary", data=b"pwned\n"),
        ],
        "member 'd/canary'",
        "symlink to a missing dir",
    )
    scene.refused(
        [Entry("d", SYM, linkname="../outside"), Entry("d/new", data=b"pwned\n")],
        "symlink to a missing dir",
    )


@pytest.mark.parametrize(
    "target", ["{canary}", "../outside/canary", "a/../../outside/canary"], ids=["abs", "up", "mid"]
)
def test_hard_link_to_a_host_path_is_refused(scene: Scene, target: str) -> None:
    linkname = target.format(canary=scene.canary)
    scene.refused(
        [Entry("h", LNK, linkname=linkname), Entry("h", data=b"pwned\n", mode=0o4777)],
        "member 'h'",
    )


def test_hard_link_to_a_symlink_pointing_outside_links_the_symlink(scene: Scene) -> None:
    root = scene.unpack(
        [
            Entry("s", SYM, linkname=str(scene.canary)),
            Entry("h", LNK, linkname="s"),
            Entry("h", data=b"pwned\n"),  # replaces the link, never writes through it
            Entry("h3", LNK, linkname="s"),
        ]
    )
    assert (root / "h").read_bytes() == b"pwned\n"
    assert os.readlink(root / "h3") == str(scene.canary)
    assert os.lstat(root / "h3").st_ino == os.lstat(root / "s").st_ino
    scene.refused(
        [
            Entry("evil", SYM, linkname=str(scene.canary.parent)),
            Entry("h2", LNK, linkname="evil/canary"),
        ],
        "member 'h2'",
    )


def test_device_nodes_are_not_made_on_the_host(scene: Scene) -> None:
    layer = make_layer(
        scene.tmp / "blob.tar.gz",
        [
            Entry("dev/sda", BLK, mode=0o666, dev=(8, 0)),
            Entry("dev/mem", CHR, mode=0o666, dev=(1, 1)),
            Entry(str(scene.canary), CHR, mode=0o666, dev=(1, 3)),
            Entry("mem2", LNK, linkname="dev/mem"),
            Entry("pipe", FIFO, mode=0o600),
        ],
    )
    got = unpack_layer(layer.blob, scene.layer_dir, digest=layer.digest, diff_id=layer.diff_id)
    assert got.skipped_devices == 4
    kinds = [os.lstat(p).st_mode for p in scene.layer_dir.rglob("*")]
    assert not any(stat.S_ISBLK(m) or stat.S_ISCHR(m) for m in kinds)
    assert stat.S_ISFIFO(os.lstat(scene.layer_dir / "pipe").st_mode)


def test_whiteouts_outside_the_layer_are_refused_or_kept_inside(scene: Scene) -> None:
    scene.refused([Entry("../outside/.wh.canary")], "'..' component")
    scene.refused(
        [Entry("l", SYM, linkname=str(scene.canary.parent)), Entry("l/.wh.canary")],
        "symlink to a missing dir",
    )
    scene.refused(
        [Entry("l", SYM, linkname="../outside"), Entry("l/.wh..wh..opq")],
        "symlink to a missing dir",
    )
    root = scene.unpack(
        [
            Entry("real", DIR, mode=0o755),
            Entry("l", SYM, linkname="../../real"),
            Entry("l/.wh.f"),
            Entry("l/.wh..wh..opq"),
            Entry(".wh.x", SYM, linkname=str(scene.canary)),
        ]
    )
    whiteout = os.lstat(root / "real/f")
    assert stat.S_ISCHR(whiteout.st_mode) and whiteout.st_rdev == 0
    assert os.getxattr(root / "real", "trusted.overlay.opaque") == b"y"
    assert stat.S_ISCHR(os.lstat(root / "x").st_mode)
    with pytest.raises(OSError):
        os.getxattr(scene.tmp / "real", "trusted.overlay.opaque")


@pytest.mark.parametrize(
    "name", ["../outside/canary", "a/../../outside/canary", "../../../../../../tmp/x"]
)
def test_dotdot_names_are_refused(scene: Scene, name: str) -> None:
    scene.refused([Entry("a", DIR), Entry(name, data=b"pwned\n")], "'..' component", repr(name))


def test_absolute_names_are_stored_inside(scene: Scene) -> None:
    root = scene.unpack([Entry(str(scene.canary), data=b"inside\n", mode=0o4755)])
    inside = root / str(scene.canary).lstrip("/")
    assert inside.read_bytes() == b"inside\n"
    assert os.lstat(inside).st_mode & 0o7777 == 0o4755  # setuid kept in the layer


def test_member_count_and_size_are_bounded(scene: Scene) -> None:
    many = [Entry(f"f{i}") for i in range(11)]
    with pytest.raises(ImageImportError, match=r"more than 10 members \(the per-layer member"):
        scene.unpack(many, LayerLimits(max_members=10))
    assert not scene.layer_dir.exists()
    big = [Entry("big", data=b"\0" * 200_000)]
    with pytest.raises(ImageImportError, match=r"more than 100000 bytes \(the per-layer size"):
        scene.unpack(big, LayerLimits(max_bytes=100_000))
    assert not scene.layer_dir.exists()


@pytest.mark.parametrize(
    "digest", ["sha256:../../../outside/canary", "md5:abc", "sha256:" + "A" * 64, 7]
)
def test_a_layout_naming_blobs_outside_itself_is_refused(tmp_path: Path, digest: object) -> None:
    layout = tmp_path / "layout"
    layout.mkdir()
    (layout / "index.json").write_text(json.dumps({"manifests": [{"digest": digest}]}))
    with pytest.raises(ImageImportError, match="is not a digest"):
        read_layout(layout)


def test_an_oversized_layout_json_is_refused(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    layout.mkdir()
    (layout / "index.json").write_text(json.dumps({"manifests": [], "pad": "x" * (5 << 20)}))
    with pytest.raises(ImageImportError, match=r"index\.json is over"):
        read_layout(layout)


# -- the content-addressed store only trusts layers it verified ---------------------------------


@pytest.fixture
def store(tmp_path: Path) -> ContentStore:
    s = ContentStore(tmp_path / "store", ImageStore(tmp_path / "images"))
    s.open()
    return s


def _store_is_empty(store: ContentStore) -> bool:
    return not any(store.layers_dir.iterdir()) and not any(store.tmp_dir.iterdir())


@pytest.mark.parametrize("lie", ["diff_id", "digest"])
def test_a_layer_that_does_not_match_its_digests_is_refused(
    store: ContentStore, tmp_path: Path, lie: str
) -> None:
    popular = make_layer(tmp_path / "popular", [Entry("bin/sh", data=b"real shell")])
    evil = make_layer(tmp_path / "evil", [Entry("bin/sh", data=b"evil shell")])
    claimed = LayoutLayer(
        evil.blob,
        popular.digest if lie == "digest" else evil.digest,
        popular.diff_id if lie == "diff_id" else evil.diff_id,
    )
    with pytest.raises(ImageImportError) as info:
        store.import_layer(claimed)
    assert ("diff id" if lie == "diff_id" else "manifest's") in str(info.value)
    assert "tampered" in str(info.value)
    assert _store_is_empty(store) and not store.has_verified_layer(claimed.diff_id)
    # The real layer still imports under its id, with its own content.
    assert store.import_layer(popular) is True
    assert (store.layer_path(popular.diff_id) / "bin/sh").read_bytes() == b"real shell"
    assert store.import_layer(popular) is False  # verified: reused


def test_a_pre_seeded_layer_entry_is_not_trusted(store: ContentStore, tmp_path: Path) -> None:
    popular = make_layer(tmp_path / "popular", [Entry("bin/sh", data=b"real shell")])
    seeded = store.layer_path(popular.diff_id)
    (seeded / "bin").mkdir(parents=True)
    (seeded / "bin/sh").write_bytes(b"evil shell")
    assert store.has_layer(popular.diff_id) and not store.has_verified_layer(popular.diff_id)
    assert store.import_layer(popular) is True
    assert (seeded / "bin/sh").read_bytes() == b"real shell"
    assert store.has_verified_layer(popular.diff_id) and not any(store.tmp_dir.iterdir())


def test_store_dirs_and_manifests_are_private(store: ContentStore, tmp_path: Path) -> None:
    layer = make_layer(tmp_path / "l", [Entry("suid", data=b"#!", mode=0o4755)])
    store.import_layer(layer)
    image = store.put_image(ImageManifest((layer.diff_id,), ImageConfig()))
    for d in (store.root, store.layers_dir, store.images_dir, store.mnt_dir, store.tmp_dir):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    manifest = store.images_dir / f"{image[7:]}.json"
    assert stat.S_IMODE(manifest.stat().st_mode) == 0o600


@pytest.mark.integration
def test_views_are_mounted_nosuid_nodev(store: ContentStore, tmp_path: Path) -> None:
    bottom = make_layer(
        tmp_path / "bottom",
        [Entry("bin/suid", data=b"#!/bin/sh\n", mode=0o4755), Entry("gone", data=b"x")],
    )
    top = make_layer(tmp_path / "top", [Entry(".wh.gone"), Entry("new", data=b"y")])
    for layer in (bottom, top):
        store.import_layer(layer)
    two = store.put_image(ImageManifest((bottom.diff_id, top.diff_id), ImageConfig()))
    one = store.put_image(ImageManifest((bottom.diff_id,), ImageConfig()))
    try:
        for image, kind in ((two, "overlay"), (one, "bind")):
            view = store.rootfs(image)
            fields = _mountinfo(view)
            options = set(fields[5].split(","))
            assert {"ro", "nosuid", "nodev"} <= options, (kind, fields)
            assert os.stat(view / "bin/suid").st_mode & stat.S_ISUID  # kept for the sandbox
        overlay = store.rootfs(two)
        assert not (overlay / "gone").exists() and (overlay / "new").read_bytes() == b"y"
    finally:
        store.unmount_all()
    assert not any(_mountinfo_lines(store.mnt_dir))


def _mountinfo_lines(under: Path) -> list[list[str]]:
    with open("/proc/self/mountinfo") as fh:
        rows = [line.split() for line in fh]
    return [r for r in rows if r[4].startswith(str(under.resolve()))]


def _mountinfo(target: Path) -> list[str]:
    rows = [r for r in _mountinfo_lines(target) if r[4] == str(target.resolve())]
    assert len(rows) == 1, rows
    return rows[0]


# -- registry credentials and TLS ---------------------------------------------------------------

FAKE_SKOPEO = """#!/bin/sh
printf '%s\\n' "$@" > "$RECORD/argv"
for a in "$@"; do
  case "$a" in
    --src-authfile=*)
      f="${a#--src-authfile=}"
      stat -c %a "$f" > "$RECORD/mode"
      stat -c %a "$(dirname "$f")" > "$RECORD/dirmode"
      cat "$f" > "$RECORD/auth"
      echo "$f" > "$RECORD/path";;
  esac
done
"""


async def test_credentials_reach_skopeo_in_an_authfile_not_its_argv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "skopeo").write_text(FAKE_SKOPEO)
    (bin_dir / "skopeo").chmod(0o755)
    record = tmp_path / "record"
    record.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("RECORD", str(record))
    work = tmp_path / "work"
    work.mkdir()
    logged: list[str] = []
    source = parse_source("registry:127.0.0.1:5999/corral/x:v1", creds="corral:s3cret")
    await fetch(source, work / "layout", logged.append)
    argv = (record / "argv").read_text()
    assert "s3cret" not in argv and "s3cret" not in "".join(logged)  # what `ps` would show
    assert "--src-tls-verify=false" not in argv  # loopback is no reason to skip TLS
    auth = json.loads((record / "auth").read_text())
    token = auth["auths"]["127.0.0.1:5999"]["auth"]
    assert token == "Y29ycmFsOnMzY3JldA=="  # base64 of corral:s3cret
    assert (record / "mode").read_text().strip() == "600"
    assert (record / "dirmode").read_text().strip() == "700"
    assert not Path((record / "path").read_text().strip()).parent.exists()  # removed after
    insecure = parse_source("registry:127.0.0.1:5999/corral/x:v1", insecure=True)
    await fetch(insecure, work / "layout2", logged.append)
    args = (record / "argv").read_text().split()
    assert "--src-tls-verify=false" in args and "--src-no-creds" in args
