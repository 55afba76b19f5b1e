"""Sandbox disks formatted ahead: a boot takes a ready ext4 image by rename instead of mkfs.

Every boot (create, wake, restore, each fork child) makes a fresh disk, and ``mkfs.ext4`` of it
took 12-24 ms of the boot (more under load). ``SpareDisks`` keeps up to ``per_size`` formatted
images of each of the last ``sizes`` sizes asked for, made in the background after a boot ends,
so the next boot of such a size only renames one into its sandbox dir and mounts it. Four by
default: a fork restores its children four at a time. A spare of the default 2,128 MiB takes
1.2 MiB of the host's disk (sparse, no journal, inode tables initialised lazily).

On-disk format, in ``directory`` (``<sandboxes dir>/.spare-disks``, the same file system as the
sandbox dirs, so a take is one ``rename``)::

    <size MiB>-<token>.img       a complete spare: mkfs ended (and synced it) before its rename
    <size MiB>-<token>.partial   being formatted; never taken

Invariants: a spare holds no data of anyone (an empty file system never mounted); it is taken by
exactly one boot (``rename`` is atomic, and a lost race is a miss: that boot formats its own). The
directory is emptied when the first refill starts (``partial`` leftovers of a crash, spares of an
earlier run whose sizes may be stale): spares are only ever a cache, never state. Locking: the
event loop's thread only; ``take`` is synchronous so no two boots of this process pick the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
from collections import OrderedDict
from pathlib import Path

from .disk import DiskError, format_disk
from .host_commands import CommandError

__all__ = ["SpareDisks"]

log = logging.getLogger(__name__)


class SpareDisks:
    """Formatted disk images made ahead in ``directory``; see the module docstring."""

    def __init__(self, directory: Path, *, per_size: int = 4, sizes: int = 2) -> None:
        self.directory = directory
        self.per_size = per_size
        self.sizes = sizes
        self._wanted: OrderedDict[int, None] = OrderedDict()  # most recently asked last
        self._refill: asyncio.Task[None] | None = None
        self._cleared = False

    def take(self, image: Path, size_mib: int) -> bool:
        """Move a spare of ``size_mib`` MiB to ``image`` (whose directory must exist) and say
        whether there was one; either way remember the size for ``refill``."""
        self._wanted[size_mib] = None
        self._wanted.move_to_end(size_mib)
        while len(self._wanted) > self.sizes:
            self._wanted.popitem(last=False)
        if not self._cleared:
            return False  # what is there is an earlier run's, cleared by the first refill
        for spare in self._spares(size_mib):
            try:
                os.rename(spare, image)
            except OSError:
                continue  # gone meanwhile (a clear, another process): try the next
            return True
        return False

    def refill(self) -> None:
        """Top up the spares of the sizes asked for lately, in the background (one at a time,
        after the boot that called this: it competes with nothing on the boot's path)."""
        if self._refill is None or self._refill.done():
            self._refill = asyncio.get_running_loop().create_task(self._top_up())

    def close(self) -> None:
        """Stop refilling (the spares stay: the next run's first refill clears them)."""
        if self._refill is not None:
            self._refill.cancel()

    def _spares(self, size_mib: int) -> list[Path]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        prefix = f"{size_mib}-"
        return [self.directory / n for n in names if n.startswith(prefix) and n.endswith(".img")]

    async def _top_up(self) -> None:
        if not self._cleared:
            await asyncio.to_thread(shutil.rmtree, self.directory, True)
            self._cleared = True
        while True:
            short = [s for s in reversed(self._wanted) if len(self._spares(s)) < self.per_size]
            if not short:
                return
            if not await self._make(short[0]):
                return  # formatting fails: the boots format their own (and say why)

    async def _make(self, size_mib: int) -> bool:
        self.directory.mkdir(mode=0o700, exist_ok=True)
        stem = self.directory / f"{size_mib}-{secrets.token_hex(6)}"
        partial = stem.with_suffix(".partial")
        try:
            await format_disk(partial, size_mib)
            os.rename(partial, stem.with_suffix(".img"))
        except (OSError, DiskError, CommandError) as exc:
            log.warning("formatting a spare disk of %d MiB failed: %s", size_mib, exc)
            with contextlib.suppress(OSError):
                partial.unlink()
            return False
        except BaseException:
            with contextlib.suppress(OSError):
                partial.unlink()
            raise
        return True
