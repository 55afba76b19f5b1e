"""The image store and the debootstrap build of the default ``base`` image."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from corral.at_rest import make_private_dir

from .in_use import mounted_anywhere

# What an agent expects of a small Linux machine: the whole Python standard library (json,
# http.client, urllib.request, sqlite3, ssl), TLS roots, curl, ps/top/free, less.
BASE_PACKAGES = ("python3", "ca-certificates", "curl", "procps", "less", "coreutils")
DEBIAN_SUITE = "bookworm"
# Documentation and translations nobody reads inside a sandbox; also kept out of later installs.
_TRIMMED = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale")
_DPKG_EXCLUDES = """\
# corral base image: no docs, man pages or translations (keeps the image small)
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
"""
_RECIPE_VERSION = 2  # bump when the build steps below change what the image holds


def base_recipe() -> str:
    """A stamp of the base image's recipe: an image built from another recipe is rebuilt."""
    text = json.dumps([_RECIPE_VERSION, DEBIAN_SUITE, BASE_PACKAGES, _TRIMMED, _DPKG_EXCLUDES])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


Progress = Callable[[str], None]


class ImageBuildError(Exception):
    """Building an image failed; the message names the image and the failing step."""


def debian_mirror(sources_dirs: tuple[str, ...] = ("/etc/apt/sources.list.d",)) -> str:
    """The machine's Debian mirror URI, read from its apt sources (deb822 or one-line format)."""
    candidates: list[Path] = []
    for directory in sources_dirs:
        path = Path(directory)
        if path.is_dir():
            candidates += sorted(path.glob("*.sources")) + sorted(path.glob("*.list"))
    candidates.append(Path("/etc/apt/sources.list"))
    for path in candidates:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for stanza in text.split("\n\n"):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if ":" in line and not line.lstrip().startswith("#"):
                        key, _, value = line.partition(":")
                        fields[key.strip().lower()] = value.strip()
                suites = fields.get("suites", "").split()
                if DEBIAN_SUITE in suites and "uris" in fields:
                    return fields["uris"].split()[0]
        else:
            for line in text.splitlines():
                parts = line.split()
                if len(parts) >= 3 and parts[0] == "deb" and DEBIAN_SUITE in parts:
                    uri = next(p for p in parts[1:] if "://" in p)
                    return uri
    raise ImageBuildError(
        f"no Debian '{DEBIAN_SUITE}' entry found in the apt sources; "
        "add one to /etc/apt/sources.list.d"
    )


class ImageStore:
    """Owns ``images_dir``. Images are never modified after they are complete."""

    def __init__(self, images_dir: Path) -> None:
        self.images_dir = images_dir

    def rootfs(self, name: str) -> Path | None:
        image = self.images_dir / name
        if (image / "image.json").is_file() and (image / "rootfs").is_dir():
            return image / "rootfs"
        return None

    def names(self) -> list[str]:
        if not self.images_dir.is_dir():
            return []
        return sorted(p.name for p in self.images_dir.iterdir() if self.rootfs(p.name))

    def recipe(self, name: str) -> str | None:
        """The recipe stamp an image was built from (None: unknown or no such image)."""
        try:
            meta = json.loads((self.images_dir / name / "image.json").read_text())
        except (OSError, ValueError):
            return None
        recipe = meta.get("recipe") if isinstance(meta, dict) else None
        return recipe if isinstance(recipe, str) else None

    def build_base(self, name: str = "base", progress: Progress = print) -> Path:
        """debootstrap a Debian minbase root with python3 into the store. Idempotent: an image
        built from the current recipe is kept; one from an older recipe is rebuilt and replaced
        (sandboxes running on the old one must be gone: its files are deleted)."""
        make_private_dir(self.images_dir)  # host-wide, yet root's alone: 0700 (see at_rest.py)
        existing = self.rootfs(name)
        if existing and self.recipe(name) == base_recipe():
            progress(f"image {name!r} already built at {existing}")
            return existing
        if existing:
            progress(f"image {name!r} is from an older recipe: rebuilding it")
        if shutil.which("debootstrap") is None:
            raise ImageBuildError("building image 'base': debootstrap is not installed")
        # 0700: the rootfs holds setuid binaries that only sandboxes may run.
        self.images_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.images_dir.chmod(0o700)
        work = Path(tempfile.mkdtemp(prefix=f".build-{name}-", dir=self.images_dir))
        try:
            mirror = debian_mirror()
            progress(f"building image {name!r}: debootstrap {DEBIAN_SUITE} (minbase) …")
            started = time.monotonic()
            cmd = [
                "debootstrap",
                "--variant=minbase",
                "--include=" + ",".join(BASE_PACKAGES),
                DEBIAN_SUITE,
                str(work / "rootfs"),
                mirror,
            ]
            with subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            ) as proc:
                assert proc.stdout is not None
                tail: list[str] = []
                for line in proc.stdout:
                    line = line.rstrip()
                    tail = [*tail[-20:], line]
                    if line.startswith(("I: Retrieving", "I: Installing core", "I: Base system")):
                        progress(f"  {line[3:]}")
                if proc.wait() != 0:
                    raise ImageBuildError(
                        f"building image {name!r}: debootstrap exited {proc.returncode}:\n"
                        + "\n".join(tail)
                    )
            rootfs = work / "rootfs"
            _trim(rootfs)
            meta = {
                "name": name,
                "source": f"debootstrap:{DEBIAN_SUITE}",
                "packages": list(BASE_PACKAGES),
                "recipe": base_recipe(),
                "built_at": time.time(),
            }
            (work / "image.json").write_text(json.dumps(meta))
            target = self.images_dir / name
            if target.exists():  # an older recipe's image, or an incomplete leftover
                self._retire(name, progress)
            os.replace(work, target)
            progress(f"image {name!r} built in {time.monotonic() - started:.0f} s")
            return self.images_dir / name / "rootfs"
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)

    def _retire(self, name: str, progress: Progress) -> None:
        """Move image ``name`` aside and delete it, unless a sandbox (of any daemon on this
        host) still runs on it: then it is kept, renamed, for its sandboxes to finish on."""
        target = self.images_dir / name
        retired = Path(tempfile.mkdtemp(prefix=f".retired-{name}-", dir=self.images_dir))
        in_use = mounted_anywhere(target / "rootfs")
        os.replace(target, retired / name)
        if in_use:
            progress(
                f"the older image {name!r} is in use by running sandboxes: kept at {retired}"
                " (delete it once they are gone)"
            )
        else:
            shutil.rmtree(retired, ignore_errors=True)


def _trim(rootfs: Path) -> None:
    """Drop what is dead weight in every sandbox's view: apt's caches and lists, documentation,
    translations; and tell dpkg to leave them out of later installs too."""
    shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
    (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    for pkgcache in (rootfs / "var/cache/apt").glob("*.bin"):
        pkgcache.unlink()
    lists = rootfs / "var/lib/apt/lists"
    if lists.is_dir():
        for entry in lists.iterdir():
            if entry.is_file() and entry.name != "lock":
                entry.unlink()
    for rel in _TRIMMED:
        target = rootfs / rel
        if target.is_dir() and not target.is_symlink():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    # keep each package's copyright file (its licence must ship with it)
                    for entry in child.iterdir():
                        if entry.name != "copyright":
                            _remove(entry)
                    if not any(child.iterdir()):
                        child.rmdir()
                else:
                    child.unlink()
    dpkg_cfg = rootfs / "etc/dpkg/dpkg.cfg.d"
    dpkg_cfg.mkdir(parents=True, exist_ok=True)
    (dpkg_cfg / "corral-nodoc").write_text(_DPKG_EXCLUDES)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
