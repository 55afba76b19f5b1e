"""OCI images in: where an image comes from, fetching it with skopeo, reading the OCI layout skopeo
wrote, and unpacking its layers safely.

Every source is first copied by ``skopeo copy`` into a private OCI image layout (skopeo speaks
docker-archive, OCI layouts and registries, with credentials and TLS settings), so the rest of
the import reads one format: ``index.json`` → manifest → config (with ``rootfs.diff_ids``) and the
layer blobs. Layers are unpacked with Python's ``tarfile`` under a filter that refuses members
that would land outside the layer dir (directly or through a symlink of the archive itself) but
keeps what images need (absolute symlinks, setuid bits, device nodes, ownership).
"""

from __future__ import annotations

import asyncio
import json
import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.images.mounts import convert_oci_whiteouts

__all__ = [
    "LOOPBACK_HOSTS",
    "ImageImportError",
    "ImageSource",
    "LayoutImage",
    "fetch",
    "parse_source",
    "read_layout",
    "unpack_layer",
]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_LAYOUT_TAG = "corral"
_SCHEMES = ("docker-archive", "oci", "registry")


class ImageImportError(Exception):
    """Fetching or unpacking an image failed; the message names the source and the cause."""


@dataclass(frozen=True)
class ImageSource:
    """An image outside the store. ``kind`` is docker-archive, oci or registry; ``ref`` the path
    (with ``:TAG`` for oci) or ``HOST/NAME:TAG``. ``creds`` (USER:PASS) is never recorded."""

    kind: str
    ref: str
    creds: str | None = None
    insecure: bool = False

    def __str__(self) -> str:
        return f"{self.kind}:{self.ref}"

    @property
    def registry_host(self) -> str:
        return self.ref.split("/", 1)[0] if self.kind == "registry" else ""

    def skopeo_args(self) -> list[str]:
        """The source half of a ``skopeo copy`` command line (transport and its flags)."""
        if self.kind == "docker-archive":
            return [f"docker-archive:{self.ref}"]
        if self.kind == "oci":
            return [f"oci:{self.ref}"]
        args = []
        host = self.registry_host.rsplit(":", 1)[0]
        if self.insecure or host in LOOPBACK_HOSTS:
            args.append("--src-tls-verify=false")
        if self.creds:
            args.append(f"--src-creds={self.creds}")
        else:
            args.append("--src-no-creds")
        return [*args, f"docker://{self.ref}"]


def parse_source(text: str, *, creds: str | None = None, insecure: bool = False) -> ImageSource:
    """Parse ``docker-archive:PATH``, ``oci:PATH[:TAG]`` or ``registry:HOST/NAME[:TAG]``.
    Raises ValueError for anything else (template names are resolved by the caller first)."""
    kind, sep, ref = text.partition(":")
    if not sep or kind not in _SCHEMES or not ref:
        raise ValueError(
            f"unknown image source {text!r}: use a template name, docker-archive:PATH, "
            "oci:PATH[:TAG] or registry:HOST/NAME:TAG"
        )
    if kind in ("docker-archive", "oci"):
        path, _, tag = ref.partition(":") if kind == "oci" else (ref, "", "")
        if not os.path.isabs(path):
            raise ValueError(f"{kind} path {path!r} must be absolute (it is read by the daemon)")
        ref = f"{path}:{tag}" if tag else path
    else:
        if "/" not in ref:
            raise ValueError(f"registry image {ref!r} must be HOST/NAME[:TAG]")
        last = ref.rsplit("/", 1)[1]
        if ":" not in last and "@" not in last:
            ref += ":latest"
    return ImageSource(kind, ref, creds=creds or None, insecure=insecure)


Log = Callable[[str], None]


async def fetch(source: ImageSource, layout: Path, log: Log, *, timeout: float = 600.0) -> None:
    """Copy ``source`` into a new OCI layout at ``layout`` with skopeo."""
    argv = [
        "skopeo",
        "--insecure-policy",
        "copy",
        "--quiet",
        *source.skopeo_args(),
        f"oci:{layout}:{_LAYOUT_TAG}",
    ]
    shown = [a if not a.startswith("--src-creds=") else "--src-creds=***" for a in argv]
    log("$ " + " ".join(shown))
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError as exc:
        proc.kill()
        await proc.wait()
        raise ImageImportError(f"fetching {source}: skopeo took more than {timeout:.0f} s") from exc
    text = out.decode(errors="replace").strip()
    if proc.returncode != 0:
        detail = text.splitlines()[-1] if text else f"exit status {proc.returncode}"
        if source.creds:
            detail = detail.replace(source.creds, "***")
        raise ImageImportError(f"fetching {source}: {detail}")


@dataclass(frozen=True)
class LayoutImage:
    """One image of an OCI layout: its config and its layers, bottom first, as
    ``(blob path, diff id)`` with diff ids ``sha256:<hex>`` of the uncompressed tar."""

    config: dict[str, Any]
    layers: list[tuple[Path, str]]


def _blob(layout: Path, digest: str) -> Path:
    algo, _, hexdigest = digest.partition(":")
    return layout / "blobs" / algo / hexdigest


def read_layout(layout: Path) -> LayoutImage:
    """Read the image skopeo wrote to ``layout`` (the one manifest of its index)."""
    try:
        index = json.loads((layout / "index.json").read_text())
        manifests = index.get("manifests") or []
        if not manifests:
            raise ImageImportError("the OCI layout holds no image")
        manifest = json.loads(_blob(layout, manifests[0]["digest"]).read_text())
        config = json.loads(_blob(layout, manifest["config"]["digest"]).read_text())
        diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
        blobs = [_blob(layout, layer["digest"]) for layer in manifest.get("layers") or []]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ImageImportError(f"reading the fetched image: {exc}") from exc
    if len(diff_ids) != len(blobs):
        raise ImageImportError(
            f"the image config lists {len(diff_ids)} diff ids for {len(blobs)} layers"
        )
    return LayoutImage(
        config=config.get("config") or {}, layers=list(zip(blobs, diff_ids, strict=True))
    )


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _safe_filter(root: str) -> Callable[[tarfile.TarInfo, str], tarfile.TarInfo | None]:
    def check(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        name = member.name.lstrip("/")
        member = member.replace(name=name, deep=False)
        target = os.path.join(dest, name)
        # The parent, with the archive's own symlinks followed, must stay inside the layer.
        parent = os.path.realpath(os.path.dirname(target))
        if not _inside(root, parent) or ".." in name.split("/"):
            raise tarfile.OutsideDestinationError(member, target)
        if member.islnk():
            link = os.path.realpath(os.path.join(dest, member.linkname.lstrip("/")))
            if not _inside(root, link):
                raise tarfile.LinkOutsideDestinationError(member, link)
        return member

    return check


def unpack_layer(blob: Path, dest: Path) -> None:
    """Unpack one layer blob (tar, gzip, bzip2 or xz) into the new dir ``dest`` and turn its OCI
    whiteouts into overlayfs ones. Blocking: call it in a thread."""
    dest.mkdir(parents=True)
    root = os.path.realpath(dest)
    try:
        with tarfile.open(blob, "r:*") as archive:
            archive.extractall(dest, numeric_owner=True, filter=_safe_filter(root))
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ImageImportError(f"unpacking layer {blob.name[:12]}: {exc}") from exc
    convert_oci_whiteouts(dest)
