"""The content-addressed image store: layers stored once by digest, images as manifests of layers.

On-disk format (``<data_dir>/store``)::

    layers/<hex>/        one unpacked layer in overlayfs format (whiteouts as 0/0 char devices);
                         <hex> is the layer's diff id (imports) or its content digest (builds);
                         its root dir's ``trusted.corral.layer`` xattr says how that id was
                         checked: ``diff:sha256:<hex>`` (unpacked from a blob whose tar had that
                         digest) or ``built:sha256:<hex>`` (``layer_digest`` of the build's output)
    images/<hex>.json    an ImageManifest; <hex> is the sha256 of the manifest's canonical JSON
    mnt/<hex[:16]>/      the read-only view of an image: an overlayfs mount of its layers (or a
                         read-only bind mount of a single layer), made on first use and re-made
                         after a reboot
    tmp/                 imports and builds in progress; cleared at start

A layer or manifest appears only by ``rename`` of a complete temporary dir or file, so a crash
never leaves half of one. An import reuses a stored layer only if its mark says it was unpacked
and verified as that diff id: a hostile image cannot pre-seed a popular layer id with other
content, and an unmarked entry (older stores) is replaced by the verified one. The store's dirs
are 0700 and its manifests 0600: layers keep their setuid files and owners for the sandboxes,
and no host user can reach them (views are also mounted ``nosuid,nodev``).

Besides store layers a manifest may name a prebuilt image of the ``ImageStore`` (the
debootstrapped ``base``) as ``prebuilt:<name>``: that rootfs is used as a bottom layer in place
and is never deleted here.

Locking: none inside; the template service serializes writes (imports, builds, gc).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from corral.images.mounts import is_mounted, mount_overlay, unmount
from corral.images.oci import LayoutLayer
from corral.images.store import ImageStore
from corral.images.unpack import LayerLimits, unpack_layer

__all__ = [
    "PREBUILT",
    "ContentStore",
    "ImageConfig",
    "ImageManifest",
    "Mounter",
    "OverlayMounter",
    "layer_digest",
]

PREBUILT = "prebuilt:"
_CHUNK = 1 << 20
_MARK_XATTR = "trusted.corral.layer"


@dataclass(frozen=True)
class ImageConfig:
    """What an image says about running it (from an OCI config or a build's steps)."""

    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    user: str | None = None
    cmd: list[str] | None = None
    entrypoint: list[str] | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_oci(cls, config: dict[str, Any]) -> ImageConfig:
        env: dict[str, str] = {}
        for item in config.get("Env") or []:
            key, _, value = str(item).partition("=")
            if key:
                env[key] = value
        return cls(
            env=env,
            workdir=config.get("WorkingDir") or None,
            user=config.get("User") or None,
            cmd=list(config["Cmd"]) if config.get("Cmd") else None,
            entrypoint=list(config["Entrypoint"]) if config.get("Entrypoint") else None,
            labels={str(k): str(v) for k, v in (config.get("Labels") or {}).items()},
        )


@dataclass(frozen=True)
class ImageManifest:
    """An image: ``layers`` bottom first (``sha256:<hex>`` store layers or ``prebuilt:<name>``),
    its config, and where it came from. Its id is the digest of its canonical JSON."""

    layers: tuple[str, ...]
    config: ImageConfig
    source: str = ""

    def to_json(self) -> str:
        data = asdict(self)
        data["layers"] = list(self.layers)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @property
    def id(self) -> str:
        return "sha256:" + hashlib.sha256(self.to_json().encode()).hexdigest()

    @classmethod
    def from_json(cls, text: str) -> ImageManifest:
        data = json.loads(text)
        return cls(
            layers=tuple(data["layers"]),
            config=ImageConfig(**data.get("config") or {}),
            source=data.get("source", ""),
        )


class Mounter(Protocol):
    """Makes and removes the host mounts of image views (real: overlayfs; fake: in tests)."""

    def mount(self, target: Path, *, layers_dir: Path, lower: list[str]) -> None: ...

    def unmount(self, target: Path) -> None: ...

    def is_mounted(self, target: Path) -> bool: ...


class OverlayMounter:
    def mount(self, target: Path, *, layers_dir: Path, lower: list[str]) -> None:
        mount_overlay(target, layers_dir=layers_dir, lower=lower)

    def unmount(self, target: Path) -> None:
        unmount(target)

    def is_mounted(self, target: Path) -> bool:
        return is_mounted(target)


def _hex(digest: str) -> str:
    algo, _, value = digest.partition(":")
    if algo != "sha256" or len(value) != 64 or not all(c in "0123456789abcdef" for c in value):
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return value


def layer_digest(root: Path) -> str:
    """A digest of a layer dir's content: every entry's path, type, mode, owner, size, link target,
    device, overlay xattr and file bytes, in sorted order (mtimes left out on purpose, so two
    builds that write the same files share a layer)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted([*dirnames, *filenames]):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, root)
            h.update(
                f"{rel}\0{st.st_mode:o}\0{st.st_uid}\0{st.st_gid}\0".encode(
                    "utf-8", "surrogateescape"
                )
            )
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(path).encode("utf-8", "surrogateescape"))
            elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                h.update(f"{st.st_rdev}".encode())
            elif stat.S_ISREG(st.st_mode):
                h.update(f"{st.st_size}\0".encode())
                with open(path, "rb") as fh:
                    while chunk := fh.read(_CHUNK):
                        h.update(chunk)
            elif stat.S_ISDIR(st.st_mode):
                with contextlib.suppress(OSError):
                    h.update(os.getxattr(path, "trusted.overlay.opaque", follow_symlinks=False))
            h.update(b"\n")
    return "sha256:" + h.hexdigest()


class ContentStore:
    """Owns ``root`` (see the module docstring); ``prebuilt`` supplies ``prebuilt:<name>``."""

    def __init__(
        self,
        root: Path,
        prebuilt: ImageStore,
        mounter: Mounter | None = None,
        limits: LayerLimits | None = None,
        mount_points: Iterable[tuple[str, bool]] = (),
    ) -> None:
        """``mount_points``: paths (and whether each is a dir) that the runtime bind-mounts into
        every sandbox. runsc makes a bind mount's mount point in the root on the host, which a
        read-only view refuses; so every view gets a small top layer (the *stub*) that holds
        them, empty."""
        self.mount_points = tuple(sorted(mount_points))
        self.root = root
        self.prebuilt = prebuilt
        self.mounter: Mounter = mounter or OverlayMounter()
        self.limits = limits or LayerLimits()
        self.layers_dir = root / "layers"
        self.images_dir = root / "images"
        self.mnt_dir = root / "mnt"
        self.tmp_dir = root / "tmp"

    # -- start ------------------------------------------------------------------------------
    def open(self) -> None:
        """Create the dirs (0700) and clear work left by an interrupted import or build."""
        for d in (self.root, self.layers_dir, self.images_dir, self.mnt_dir, self.tmp_dir):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            d.chmod(0o700)
        for leftover in self.tmp_dir.iterdir():
            self._remove_tree(leftover)

    def work_dir(self, prefix: str) -> Path:
        """A new private dir under ``tmp/`` for one import or build (the caller removes it)."""
        self.tmp_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self.tmp_dir))

    # -- layers ------------------------------------------------------------------------------
    def layer_path(self, ref: str) -> Path:
        if ref.startswith(PREBUILT):
            rootfs = self.prebuilt.rootfs(ref[len(PREBUILT) :])
            if rootfs is None:
                raise FileNotFoundError(f"prebuilt image {ref[len(PREBUILT) :]!r} is missing")
            return rootfs
        return self.layers_dir / _hex(ref)

    def has_layer(self, ref: str) -> bool:
        try:
            return self.layer_path(ref).is_dir()
        except (ValueError, FileNotFoundError):
            return False

    def has_verified_layer(self, diff_id: str) -> bool:
        """Whether the layer ``diff_id`` is stored *and* was unpacked from a blob whose
        uncompressed tar has that digest (the only entries an import may reuse)."""
        try:
            mark = os.getxattr(self.layer_path(diff_id), _MARK_XATTR, follow_symlinks=False)
        except (OSError, ValueError):
            return False
        return mark == f"diff:{diff_id}".encode()

    def import_layer(self, layer: LayoutLayer) -> bool:
        """Store ``layer`` under its diff id: unpack its blob into the store's tmp dir (inside
        its own root, bounded by ``limits``), checking the blob's digest and diff id in the same
        pass, and only then move it in. Returns whether the layer was new. Blocking: call it in a
        thread. Raises ImageImportError and stores nothing when the layer is refused."""
        if self.has_verified_layer(layer.diff_id):
            return False
        target = self.layer_path(layer.diff_id)
        work = self.work_dir(".layer-")
        try:
            unpacked = unpack_layer(
                layer.blob,
                work / "layer",
                digest=layer.digest,
                diff_id=layer.diff_id,
                limits=self.limits,
            )
            os.setxattr(unpacked.path, _MARK_XATTR, f"diff:{layer.diff_id}".encode())
            if target.exists() or target.is_symlink():
                # Not written by this path (an older store's): set it aside, keep the checked one.
                os.replace(target, work / "unverified")
            os.replace(unpacked.path, target)
        finally:
            self._remove_tree(work)
        return True

    def add_layer(self, ref: str, unpacked: Path) -> bool:
        """Move the complete built layer dir ``unpacked`` in as ``ref``, which the caller
        computed as ``layer_digest(unpacked)``; if that layer is already stored, drop
        ``unpacked`` instead. Returns whether the layer was new."""
        target = self.layer_path(ref)
        if target.is_dir():
            self._remove_tree(unpacked)
            return False
        os.setxattr(unpacked, _MARK_XATTR, f"built:{ref}".encode(), follow_symlinks=False)
        os.replace(unpacked, target)
        return True

    # -- images ------------------------------------------------------------------------------
    def put_image(self, manifest: ImageManifest) -> str:
        """Record ``manifest`` (all its layers must be stored); returns the image id."""
        for ref in manifest.layers:
            if not self.has_layer(ref):
                raise FileNotFoundError(f"layer {ref} of the new image is not stored")
        image_id = manifest.id
        path = self.images_dir / f"{_hex(image_id)}.json"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.unlink(missing_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with open(fd, "w") as fh:
                fh.write(manifest.to_json())
            os.replace(tmp, path)
        return image_id

    def get_image(self, image_id: str) -> ImageManifest | None:
        try:
            return ImageManifest.from_json((self.images_dir / f"{_hex(image_id)}.json").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def image_ids(self) -> list[str]:
        if not self.images_dir.is_dir():
            return []
        return sorted("sha256:" + p.stem for p in self.images_dir.glob("*.json"))

    def _stub(self) -> str | None:
        points = self.mount_points
        if not points:
            return None
        key = hashlib.sha256(json.dumps(points).encode()).hexdigest()[:16]
        stub = self.root / "stub" / key
        if not stub.is_dir():
            work = self.work_dir(".stub-")
            work.chmod(0o755)  # the top layer's root dir is the view's "/"
            for path, is_dir in points:
                target = work / path.lstrip("/")
                if is_dir:
                    target.mkdir(parents=True, exist_ok=True)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.touch()
                # The sandbox sees these modes: explicit, whatever the daemon's umask (077).
                for part in (target, *target.relative_to(work).parents):
                    (work / part).chmod(0o755 if (work / part).is_dir() else 0o644)
            stub.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.replace(work, stub)
        return str(stub)

    def lower_dirs(self, manifest: ImageManifest) -> list[str]:
        """The image's layers as overlayfs lower dirs, top first (store layers by name), under
        the stub of the runtime's mount points."""
        out = []
        stub = self._stub()
        if stub is not None:
            out.append(stub)
        for ref in reversed(manifest.layers):
            out.append(str(self.layer_path(ref)) if ref.startswith(PREBUILT) else _hex(ref))
        return out

    def _view(self, image_id: str) -> Path:
        stub = self._stub()
        suffix = "-" + Path(stub).name[:8] if stub else ""
        return self.mnt_dir / (_hex(image_id)[:16] + suffix)

    def rootfs(self, image_id: str) -> Path:
        """The read-only directory of the image (mounted on first use)."""
        manifest = self.get_image(image_id)
        if manifest is None:
            raise FileNotFoundError(f"image {image_id} is not in the store")
        if len(manifest.layers) == 1 and manifest.layers[0].startswith(PREBUILT):
            return self.layer_path(manifest.layers[0])
        target = self._view(image_id)
        if not self.mounter.is_mounted(target):
            lower = self.lower_dirs(manifest)
            self.mounter.mount(target, layers_dir=self.layers_dir, lower=lower)
        return target

    # -- garbage collection ------------------------------------------------------------------
    def gc(self, keep_images: Iterable[str]) -> tuple[list[str], list[str]]:
        """Delete every image not in ``keep_images`` (unmounting its view) and every layer no
        kept image uses. Returns (removed image ids, removed layer refs)."""
        keep = {i for i in keep_images if i.startswith("sha256:")}
        removed_images: list[str] = []
        used: set[str] = set()
        for image_id in self.image_ids():
            manifest = self.get_image(image_id)
            if image_id in keep and manifest is not None:
                used.update(manifest.layers)
                continue
            for target in self.mnt_dir.glob(_hex(image_id)[:16] + "*"):
                self.mounter.unmount(target)
                with contextlib.suppress(OSError):
                    target.rmdir()
            (self.images_dir / f"{_hex(image_id)}.json").unlink(missing_ok=True)
            removed_images.append(image_id)
        removed_layers: list[str] = []
        if self.layers_dir.is_dir():
            for layer in self.layers_dir.iterdir():
                ref = "sha256:" + layer.name
                if ref not in used:
                    self._remove_tree(layer)
                    removed_layers.append(ref)
        return removed_images, removed_layers

    def unmount_all(self) -> None:
        if self.mnt_dir.is_dir():
            for target in self.mnt_dir.iterdir():
                self.mounter.unmount(target)

    @staticmethod
    def _remove_tree(path: Path) -> None:
        # Built layers carry root-owned, read-only dirs: shutil.rmtree copes as root.
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
