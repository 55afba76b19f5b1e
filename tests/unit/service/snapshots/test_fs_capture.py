"""Files-only snapshots: the host's checks of what the sandbox lists."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.service.snapshots.fs_capture import (
    BadListing,
    Entry,
    check_path,
    compare,
    parse_listing,
    walk_image,
)


@pytest.mark.parametrize(
    "evil",
    [
        b"/../../etc/shadow",
        b"/root/../../etc",
        b"relative/path",
        b"/a//b",
        b"/a/./b",
        b"/",
        b"/" + b"x" * 5000,
        b"/" + b"y" * 300,
    ],
)
def test_check_path_refuses_anything_but_plain_absolute_paths(evil: bytes) -> None:
    with pytest.raises(BadListing):
        check_path(evil)


def test_odd_but_legal_names_pass() -> None:
    for name in (b"/root/...", b"/root/a\nb", b"/root/ lead", b"/root/\xff", b"/root/dot.."):
        assert check_path(name) == name


def test_a_forged_listing_is_refused_whole() -> None:
    good = b"f 3 100 /root/ok\0"
    with pytest.raises(BadListing):
        parse_listing(good + b"f 3 100 /root/../../../etc/passwd\0", 100)
    with pytest.raises(BadListing):
        parse_listing(good + b"q 3 100 /root/x\0", 100)
    with pytest.raises(BadListing):
        parse_listing(good + b"f -3 100 /root/x\0", 100)
    with pytest.raises(BadListing, match="more than 2 files"):
        parse_listing(good * 3, 2)
    assert parse_listing(good, 2) == [Entry(b"f", 3, 100, b"/root/ok")]


def test_walk_image_never_follows_the_images_symlinks(tmp_path: Path) -> None:
    rootfs, canary = tmp_path / "rootfs", tmp_path / "canary"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "os-release").write_text("image")
    canary.mkdir()
    (canary / "host-secret").write_text("host")
    os.symlink(canary, rootfs / "evil")  # a hostile image pointing at a host dir
    (rootfs / "proc").mkdir()
    (rootfs / "proc" / "x").write_text("pruned")
    found = walk_image(rootfs)
    assert set(found) == {b"/etc", b"/etc/os-release", b"/evil"}
    assert found[b"/evil"].kind == b"l"


def test_compare_finds_changes_and_deletions_without_touching_the_host() -> None:
    image = {
        b"/etc": Entry(b"d", 4096, 1, b"/etc"),
        b"/etc/a": Entry(b"f", 3, 1, b"/etc/a"),
        b"/etc/b": Entry(b"f", 3, 1, b"/etc/b"),
        b"/opt": Entry(b"d", 4096, 1, b"/opt"),
        b"/opt/x": Entry(b"f", 1, 1, b"/opt/x"),
        b"/opt/y": Entry(b"f", 1, 1, b"/opt/y"),
    }
    listing = [
        Entry(b"d", 4096, 9, b"/etc"),
        Entry(b"f", 3, 1, b"/etc/a"),  # unchanged
        Entry(b"f", 4, 2, b"/etc/b"),  # changed
        Entry(b"l", 10, 2, b"/etc/link"),  # new symlink
        Entry(b"o", 0, 2, b"/etc/fifo"),  # fifos are left out
        Entry(b"f", 1, 1, b"/proc/self"),  # pruned
    ]
    changed, deleted = compare(listing, image)
    assert changed == [b"/etc/b", b"/etc/link"]
    assert deleted == [b"/opt"]  # its children are gone with it


def test_the_resolver_config_is_never_captured() -> None:
    from corral.service.snapshots.fs_capture import Entry, compare

    image = {b"/etc/resolv.conf": Entry(b"f", 1, 1, b"/etc/resolv.conf")}
    listed = [Entry(b"f", 40, 2, b"/etc/resolv.conf")]  # the read-only bind mount differs
    assert compare(listed, image) == ([], [])
