"""COPY and ADD steps of a build: files of the uploaded build context into the build sandbox.

Sources are read only from the build's context, a private dir the daemon unpacked from the
client's upload (``service/uploads.py``); a source is resolved inside it (``..`` that climbs out
and symlinks that lead out are refused, ``images/context.py``), files are opened without
following symlinks, and symlinks inside copied dirs are skipped. ``.corral-copy`` at the
context's root is where the CLI and the SDK put ``--copy``/``copy()`` sources: a COPY of the
whole context skips it. Targets are written through the sandbox's agent, so the sandbox resolves
them (a symlink in the image cannot point a write at the host).
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import stat
import tarfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import IO, Any

from corral.images.context import ContextError, resolve_source
from corral.runtime.agent_client import AgentClient

__all__ = ["CopyFailed", "copy_sources"]

_CHUNK = 1 << 20
CLIENT_COPY_DIR = ".corral-copy"


class CopyFailed(Exception):
    """A COPY source is missing, outside the context, or unreadable."""


def _source(context: Path | None, src: str) -> Path:
    if context is None:
        raise CopyFailed(
            f"COPY source {src!r} needs a build context: upload one (the CLI and the SDK pack "
            "the Dockerfile's dir and the --copy sources); the daemon reads no host path"
        )
    try:
        return resolve_source(context, src)
    except ContextError as exc:
        raise CopyFailed(str(exc)) from exc


async def _chunks(fh: IO[bytes]) -> AsyncIterator[bytes]:
    try:
        while chunk := await asyncio.to_thread(fh.read, _CHUNK):
            yield chunk
    finally:
        fh.close()


async def _put(client: AgentClient, src: Path, target: str) -> int:
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return 0  # a symlink (skipped) or gone
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return 0
    fh = os.fdopen(fd, "rb")
    await client.write_file(target, _chunks(fh), mode=st.st_mode & 0o777, parents=True)
    return 1


async def _put_tar(client: AgentClient, src: Path, dst: str) -> int:
    count = 0
    with tarfile.open(src, "r:*") as archive:
        for member in archive:
            name = posixpath.normpath(member.name.lstrip("/"))
            if name == ".." or name.startswith("../"):
                continue
            target = os.path.join(dst, name)
            if member.isdir():
                await client.mkdir(target, parents=True)
            elif member.isfile():
                fh = archive.extractfile(member)
                assert fh is not None

                async def chunks(fh: IO[bytes] = fh) -> AsyncIterator[bytes]:
                    while chunk := fh.read(_CHUNK):
                        yield chunk

                await client.write_file(target, chunks(), mode=member.mode & 0o777, parents=True)
                count += 1
    return count


async def copy_sources(
    client: AgentClient,
    value: dict[str, Any],
    context: Path | None,
    dst: str,
    say: Callable[[str], Awaitable[None]],
) -> None:
    """Copy ``value["src"]`` (paths in ``context``) to ``dst`` (absolute, in the sandbox)."""
    sources = [(str(s), _source(context, str(s))) for s in value["src"]]
    into_dir = str(value["dst"]).endswith("/") or len(sources) > 1
    context_root = (
        None if context is None else Path(await asyncio.to_thread(os.path.realpath, context))
    )
    copied = 0
    for given, src in sources:
        if value.get("extract") and src.is_file() and tarfile.is_tarfile(src):
            copied += await _put_tar(client, src, dst)
        elif src.is_dir():
            whole = context_root is not None and src == context_root
            for dirpath, dirs, files in os.walk(src):
                rel = posixpath.relpath(dirpath, src)
                if whole and rel == ".":
                    dirs[:] = [d for d in dirs if d != CLIENT_COPY_DIR]
                target_dir = posixpath.normpath(posixpath.join(dst, rel))
                await client.mkdir(target_dir, parents=True)
                for file in sorted(files):
                    target = os.path.join(target_dir, file)
                    copied += await _put(client, Path(dirpath, file), target)
        elif src.is_file():
            name = os.path.basename(given.rstrip("/")) or src.name
            copied += await _put(client, src, os.path.join(dst, name) if into_dir else dst)
        else:
            raise CopyFailed(f"COPY source {given!r} does not exist in the build context")
    await say(f"copied {copied} file(s) to {dst}")
