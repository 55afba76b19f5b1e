"""The SDK packs build contexts itself (the daemon reads no local path): .dockerignore, copies."""

from __future__ import annotations

import tarfile
from pathlib import Path

from corral.sdk._build_context import DockerIgnore, pack
from corral.sdk.templates import Template


def test_dockerignore_patterns() -> None:
    ignore = DockerIgnore(["# comment", "*.log", "build/", "**/__pycache__", "!keep.log", "/tmp?"])
    assert ignore.excludes("a.log") and not ignore.excludes("keep.log")
    assert ignore.excludes("build") and ignore.excludes("build/x/y")
    assert ignore.excludes("__pycache__/m.pyc") and ignore.excludes("a/b/__pycache__")
    assert ignore.excludes("tmp1") and not ignore.excludes("tmp12")
    assert not ignore.excludes("src/a.log")  # '*' does not cross '/'
    assert not ignore.excludes("src/main.py")


def test_pack_honours_dockerignore_and_adds_copies(tmp_path: Path) -> None:
    context = tmp_path / "ctx"
    (context / "src").mkdir(parents=True)
    (context / "src" / "main.py").write_text("print(1)\n")
    (context / "debug.log").write_text("noise")
    (context / ".dockerignore").write_text("*.log\n")
    extra = tmp_path / "extra.txt"
    extra.write_text("extra")
    with (
        pack(context, [(extra, ".corral-copy/0/extra.txt")]) as fh,
        tarfile.open(fileobj=fh) as tar,
    ):
        names = set(tar.getnames())
        assert all(m.uid == 0 for m in tar.getmembers() if not m.name.startswith(".corral"))
    assert {"src", "src/main.py", ".dockerignore", ".corral-copy/0/extra.txt"} <= names
    assert "debug.log" not in names


def test_builder_copy_steps_name_paths_inside_the_uploaded_context(tmp_path: Path) -> None:
    spec = Template().from_image("base").copy(tmp_path / "a.txt", "/app/").copy("rel", "/b")
    body = spec.body("t")
    sources = [step["value"]["src"] for step in body["steps"]]
    assert sources == [[".corral-copy/0/a.txt"], [".corral-copy/1/rel"]]
    assert "context_dir" not in body  # the daemon is never asked to read a local path
