"""Reading an OCI layer blob as a verified stream: its sha256 computed as it is read, its size
bounded, and its compression (gzip, bzip2, xz or none) undone, so that ``unpack.py`` can check
both the blob's digest and its uncompressed tar's diff id in the same single pass.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
from typing import IO, cast

from corral.images.oci import ImageImportError

__all__ = ["CHUNK", "Digesting", "decompressor"]

CHUNK = 1 << 20


class Digesting:
    """A read-only stream that hashes what passes through it and stops past ``limit`` bytes."""

    def __init__(self, raw: IO[bytes], limit: int | None = None, what: str = "") -> None:
        self.raw = raw
        self.hash = hashlib.sha256()
        self.count = 0
        self.limit = limit
        self.what = what

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.count += len(data)
        if self.limit is not None and self.count > self.limit:
            raise ImageImportError(self.what)
        self.hash.update(data)
        return data

    def drain(self) -> None:
        while self.read(CHUNK):
            pass

    def digest(self) -> str:
        return "sha256:" + self.hash.hexdigest()


def decompressor(digesting: Digesting, head: bytes, label: str) -> IO[bytes]:
    """The uncompressed tar of a blob read through ``digesting``, by its first bytes ``head``
    (gzip, bzip2, xz, or none); zstd is refused."""
    stream = cast(IO[bytes], digesting)
    if head.startswith(b"\x1f\x8b"):
        return cast(IO[bytes], gzip.GzipFile(fileobj=stream, mode="rb"))
    if head.startswith(b"BZh"):
        return cast(IO[bytes], bz2.BZ2File(stream))
    if head.startswith(b"\xfd7zXZ\x00"):
        return cast(IO[bytes], lzma.LZMAFile(stream))
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        raise ImageImportError(
            f"unpacking layer {label}: zstd-compressed layers are not supported; "
            "re-push the image with gzip layers"
        )
    return stream
