"""OCI images in: where an image comes from, fetching it with skopeo and reading the OCI layout
skopeo wrote.

Every source is first copied by ``skopeo copy`` into a private OCI image layout (skopeo speaks
docker-archive, OCI layouts and registries, with credentials and TLS settings), so the rest of
the import reads one format: ``index.json`` → manifest → config (with ``rootfs.diff_ids``) and the
layer blobs (unpacked and verified by ``corral.images.unpack``). Registry credentials reach skopeo
in a 0600 auth file of a private temp dir (never on its command line, which ``ps`` shows), and TLS
is verified unless the caller asked for ``insecure``, loopback registries included.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ImageImportError",
    "ImageSource",
    "LayoutImage",
    "LayoutLayer",
    "fetch",
    "parse_source",
    "read_layout",
    "skopeo_copy_argv",
]

_LAYOUT_TAG = "corral"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_MAX_JSON = 4 << 20  # index, manifest and config are small; a bigger one is hostile
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

    def skopeo_args(self, authfile: Path | None = None) -> list[str]:
        """The source half of a ``skopeo copy`` command line (transport and its flags);
        ``authfile`` holds the credentials (see ``write_authfile``)."""
        if self.kind == "docker-archive":
            return [f"docker-archive:{self.ref}"]
        if self.kind == "oci":
            return [f"oci:{self.ref}"]
        args = []
        if self.insecure:
            args.append("--src-tls-verify=false")
        if self.creds and authfile is not None:
            args.append(f"--src-authfile={authfile}")
        else:
            args.append("--src-no-creds")
        return [*args, f"docker://{self.ref}"]

    def write_authfile(self, directory: Path) -> Path:
        """Write the credentials as a containers-auth.json (mode 0600) into the private dir
        ``directory``; returns its path."""
        user, _, password = (self.creds or "").partition(":")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        path = directory / "auth.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with open(fd, "w") as fh:
            json.dump({"auths": {self.registry_host: {"auth": token}}}, fh)
        return path


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


def skopeo_copy_argv(source: ImageSource, layout: Path, authfile: Path | None = None) -> list[str]:
    """The ``skopeo copy`` command that copies ``source`` into the OCI layout ``layout``."""
    return [
        "skopeo",
        "--insecure-policy",
        "copy",
        "--quiet",
        *source.skopeo_args(authfile),
        f"oci:{layout}:{_LAYOUT_TAG}",
    ]


async def fetch(source: ImageSource, layout: Path, log: Log, *, timeout: float = 600.0) -> None:
    """Copy ``source`` into a new OCI layout at ``layout`` with skopeo. Credentials go through
    an auth file in a private temp dir beside ``layout``, removed when skopeo is done."""
    private = None
    try:
        authfile = None
        if source.kind == "registry" and source.creds:
            private = Path(tempfile.mkdtemp(prefix=".auth-", dir=layout.parent))
            authfile = source.write_authfile(private)
        argv = skopeo_copy_argv(source, layout, authfile)
        log("$ " + " ".join(argv))
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError as exc:
            proc.kill()
            await proc.wait()
            raise ImageImportError(
                f"fetching {source}: skopeo took more than {timeout:.0f} s"
            ) from exc
    finally:
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
    text = out.decode(errors="replace").strip()
    if proc.returncode != 0:
        detail = text.splitlines()[-1] if text else f"exit status {proc.returncode}"
        if source.creds:
            detail = detail.replace(source.creds, "***")
        raise ImageImportError(f"fetching {source}: {detail}")


@dataclass(frozen=True)
class LayoutLayer:
    """One layer of a fetched image: its blob, the blob's digest (from the manifest) and its
    diff id (the digest of the uncompressed tar, from the config); both are *claims* that
    unpacking checks."""

    blob: Path
    digest: str
    diff_id: str


@dataclass(frozen=True)
class LayoutImage:
    """One image of an OCI layout: its config and its layers, bottom first."""

    config: dict[str, Any]
    layers: list[LayoutLayer]


def _digest(value: object, what: str) -> str:
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise ImageImportError(f"reading the fetched image: {what} {value!r} is not a digest")
    return value


def _blob(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest[len("sha256:") :]


def _read_json(path: Path) -> Any:
    with open(path, "rb") as fh:
        data = fh.read(_MAX_JSON + 1)
    if len(data) > _MAX_JSON:
        raise ImageImportError(f"reading the fetched image: {path.name} is over {_MAX_JSON} bytes")
    return json.loads(data)


def read_layout(layout: Path) -> LayoutImage:
    """Read the image skopeo wrote to ``layout`` (the one manifest of its index)."""
    try:
        index = _read_json(layout / "index.json")
        manifests = index.get("manifests") or []
        if not manifests:
            raise ImageImportError("the OCI layout holds no image")
        manifest = _read_json(_blob(layout, _digest(manifests[0]["digest"], "manifest")))
        config_digest = _digest(manifest["config"]["digest"], "config")
        config = _read_json(_blob(layout, config_digest))
        diff_ids = [
            _digest(d, "diff id") for d in (config.get("rootfs") or {}).get("diff_ids") or []
        ]
        digests = [_digest(layer["digest"], "layer") for layer in manifest.get("layers") or []]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ImageImportError(f"reading the fetched image: {exc}") from exc
    if len(diff_ids) != len(digests):
        raise ImageImportError(
            f"the image config lists {len(diff_ids)} diff ids for {len(digests)} layers"
        )
    layers = [
        LayoutLayer(_blob(layout, d), d, diff_id)
        for d, diff_id in zip(digests, diff_ids, strict=True)
    ]
    return LayoutImage(config=config.get("config") or {}, layers=layers)
