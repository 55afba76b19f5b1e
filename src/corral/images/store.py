"""The image store and the debootstrap build of the default ``base`` image."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from corral.at_rest import make_private_dir

BASE_PACKAGES = ("python3-minimal", "procps", "ca-certificates", "coreutils")
DEBIAN_SUITE = "bookworm"

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

    def build_base(self, name: str = "base", progress: Progress = print) -> Path:
        """debootstrap a Debian minbase root with python3 into the store (idempotent)."""
        make_private_dir(self.images_dir)  # host-wide, yet root's alone: 0700 (see at_rest.py)
        existing = self.rootfs(name)
        if existing:
            progress(f"image {name!r} already built at {existing}")
            return existing
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
            # Clean apt caches: they are dead weight in every sandbox's view.
            shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
            (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
            meta = {"name": name, "source": f"debootstrap:{DEBIAN_SUITE}", "built_at": time.time()}
            (work / "image.json").write_text(json.dumps(meta))
            target = self.images_dir / name
            if target.exists():  # an incomplete leftover (no image.json)
                shutil.rmtree(target)
            os.replace(work, target)
            progress(f"image {name!r} built in {time.monotonic() - started:.0f} s")
            return self.images_dir / name / "rootfs"
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)
