"""Packing what a template build reads into tars the daemon can take (it reads no local path).

A build context is one tar: the context dir (the Dockerfile's dir, or `set_context`) at its root,
less what its `.dockerignore` excludes, plus every `copy()` source under `.corral-copy/N/NAME`.
An OCI layout dir is packed the same way; a docker-archive file is sent as it is. The tars are
written to an unnamed temporary file and streamed from it, so nothing big sits in memory.
"""

from __future__ import annotations

import os
import re
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO

__all__ = ["COPY_DIR", "DockerIgnore", "pack"]

COPY_DIR = ".corral-copy"


class DockerIgnore:
    """The patterns of a `.dockerignore` (`*`, `?`, `**`, `!` exceptions; last match wins)."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._rules: list[tuple[bool, re.Pattern[str]]] = []
        for raw in lines:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            keep = line.startswith("!")
            pattern = os.path.normpath(line.lstrip("!").strip().lstrip("/"))
            if pattern in (".", ""):
                continue
            self._rules.append((keep, re.compile(_translate(pattern))))

    @classmethod
    def of(cls, directory: Path) -> DockerIgnore:
        path = directory / ".dockerignore"
        return cls(path.read_text().splitlines() if path.is_file() else [])

    def excludes(self, rel: str) -> bool:
        """Whether the path `rel` (relative, `/`-separated) is left out of the context."""
        parts = rel.split("/")
        excluded = False
        for keep, rule in self._rules:
            # A pattern that matches a dir matches everything in it.
            if any(rule.fullmatch("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
                excluded = not keep
        return excluded


def _translate(pattern: str) -> str:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            if pattern.startswith("/", i):
                out[-1] = "(?:.*/)?"
                i += 1
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def pack(context: Path | None, copies: Iterable[tuple[Path, str]] = ()) -> IO[bytes]:
    """A tar (in a temporary file, rewound) of `context` and of each `(local path, arcname)`."""
    out = tempfile.TemporaryFile()  # noqa: SIM115 - the caller streams and closes it
    try:
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            if context is not None:
                ignore = DockerIgnore.of(context)

                def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
                    rel = info.name.removeprefix("./")
                    if rel and rel != "." and ignore.excludes(rel):
                        return None
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    return info

                for entry in sorted(os.listdir(context)):
                    tar.add(context / entry, arcname=entry, filter=keep)
            for local, arcname in copies:
                if not os.path.lexists(local):
                    raise FileNotFoundError(f"copy source {local} does not exist")
                tar.add(local, arcname=arcname)
        out.seek(0)
    except BaseException:
        out.close()
        raise
    return out
