"""Safe unpacking of uploaded build contexts and COPY source resolution (images/context.py)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from corral.images.context import (
    ContextError,
    ContextLimits,
    extract_tar,
    resolve_import,
    resolve_source,
)

LIMITS = ContextLimits(max_bytes=1 << 20, max_members=100)


def make_tar(path: Path, *members: tuple[tarfile.TarInfo, bytes | None]) -> Path:
    with tarfile.open(path, "w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def info(
    name: str, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644
) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type = kind
    member.linkname = link
    member.mode = mode
    return member


def test_files_dirs_and_inner_links_are_unpacked(tmp_path: Path) -> None:
    archive = make_tar(
        tmp_path / "ok.tar",
        (info("src", tarfile.DIRTYPE, mode=0o755), None),
        (info("src/a.txt", mode=0o4755), b"hello"),
        (info("src/link", tarfile.SYMTYPE, link="a.txt"), None),
        (info("copy.txt", tarfile.LNKTYPE, link="src/a.txt"), None),
    )
    dest = tmp_path / "out"
    dest.mkdir()
    assert extract_tar(archive, dest, LIMITS) == 4
    assert (dest / "src" / "a.txt").read_bytes() == b"hello"
    assert (dest / "src" / "a.txt").stat().st_mode & 0o7777 == 0o755  # no setuid
    assert os.readlink(dest / "src" / "link") == "a.txt"
    assert (dest / "copy.txt").read_bytes() == b"hello"
    assert (dest / "copy.txt").stat().st_nlink == 1  # a copy, not a link


@pytest.mark.parametrize(
    ("member", "message"),
    [
        ((info("../escape.txt"), b"x"), "'..' is not allowed"),
        ((info("a/../../escape.txt"), b"x"), "'..' is not allowed"),
        ((info("/etc/cron.d/x"), b"x"), "absolute names are not allowed"),
        ((info("link", tarfile.SYMTYPE, link="/etc/shadow"), None), "absolute path"),
        ((info("link", tarfile.SYMTYPE, link="../../etc"), None), "outside the context"),
        ((info("hard", tarfile.LNKTYPE, link="/etc/shadow"), None), "absolute names"),
        ((info("hard", tarfile.LNKTYPE, link="elsewhere"), None), "not a file of this archive"),
        ((info("dev", tarfile.CHRTYPE), None), "is a device file"),
        ((info("fifo", tarfile.FIFOTYPE), None), "is a fifo file"),
    ],
    ids=[
        "dotdot",
        "nested-dotdot",
        "absolute",
        "abs-symlink",
        "rel-symlink-out",
        "hardlink-abs",
        "hardlink-unknown",
        "device",
        "fifo",
    ],
)
def test_unsafe_members_refuse_the_archive(
    tmp_path: Path, member: tuple[tarfile.TarInfo, bytes | None], message: str
) -> None:
    archive = make_tar(tmp_path / "bad.tar", member)
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(ContextError, match=message):
        extract_tar(archive, dest, LIMITS)
    assert not (tmp_path / "escape.txt").exists()


def test_no_member_is_written_through_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    archive = make_tar(
        tmp_path / "bad.tar",
        (info("d", tarfile.DIRTYPE, mode=0o755), None),
        (info("d/x", tarfile.SYMTYPE, link="."), None),  # inside, allowed
        (info("e", tarfile.SYMTYPE, link="d"), None),
        (info("e/planted", mode=0o644), b"x"),  # through the link: refused
    )
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(ContextError, match="is not a directory"):
        extract_tar(archive, dest, LIMITS)
    assert not (dest / "d" / "planted").exists()


def test_limits_bound_size_and_count(tmp_path: Path) -> None:
    big = make_tar(tmp_path / "big.tar", (info("big"), b"x" * 2048))
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(ContextError, match="larger than"):
        extract_tar(big, dest, ContextLimits(max_bytes=1024, max_members=10))
    many = make_tar(tmp_path / "many.tar", *[(info(f"f{i}"), b"") for i in range(5)])
    with pytest.raises(ContextError, match="more than 3 members"):
        extract_tar(many, tmp_path / "out", ContextLimits(max_bytes=1024, max_members=3))


def test_not_a_tar_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"not a tar at all" * 100)
    with pytest.raises(ContextError, match="not a tar archive"):
        extract_tar(bad, tmp_path, LIMITS)


def test_copy_sources_resolve_only_inside_the_context(tmp_path: Path) -> None:
    context = tmp_path / "ctx"
    (context / "src").mkdir(parents=True)
    (context / "src" / "a").write_text("a")
    (context / "inner").symlink_to("src/a")
    (context / "out").symlink_to("/etc/shadow")
    (context / "outdir").symlink_to(tmp_path)
    real = Path(os.path.realpath(context))
    assert resolve_source(context, "src/a") == real / "src" / "a"
    assert resolve_source(context, "/src/a") == real / "src" / "a"  # "/" is the context's root
    assert resolve_source(context, "src/../src/a") == real / "src" / "a"
    assert resolve_source(context, "inner") == real / "src" / "a"
    assert resolve_source(context, ".") == real
    for src in ("../../etc/shadow", "src/../../x", "/../etc/shadow"):
        with pytest.raises(ContextError, match="climbs out"):
            resolve_source(context, src)
    for src in ("out", "outdir/secret.txt"):
        with pytest.raises(ContextError, match="leads out"):
            resolve_source(context, src)


def test_import_paths_resolve_only_inside_the_import_dir(tmp_path: Path) -> None:
    imports = tmp_path / "imports"
    imports.mkdir()
    (imports / "x.tar").write_bytes(b"x")
    (imports / "escape").symlink_to("/etc/shadow")
    assert resolve_import(imports, str(imports / "x.tar")) == Path(
        os.path.realpath(imports / "x.tar")
    )
    for path in (str(imports / "escape"), str(imports / ".." / "x"), "/etc/shadow", str(imports)):
        with pytest.raises(ContextError, match="not inside the import dir"):
            resolve_import(imports, path)
    with pytest.raises(ContextError, match="does not exist"):
        resolve_import(imports, str(imports / "missing.tar"))
