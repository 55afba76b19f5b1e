"""Test images made offline: a busybox-only root (Debian's busybox-static and its applet
symlinks) written as a docker-archive (``docker save``) and as an OCI image layout."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "ls", "cat", "echo", "mkdir", "touch", "pwd", "env", "id", "sleep", "wc", "true")


def busybox_layer() -> bytes:
    """An uncompressed layer tar: /bin/busybox, applet symlinks, and the usual empty dirs."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "etc", "tmp", "proc", "sys", "dev", "root"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        data = BUSYBOX.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size, info.mode = len(passwd), 0o644
        tar.addfile(info, io.BytesIO(passwd))
    return out.getvalue()


def _config(diff_ids: list[str]) -> bytes:
    return json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": ["PATH=/bin", "IMAGE_VAR=busybox"], "Cmd": ["sh"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
    ).encode()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def write_docker_archive(path: Path, repo_tag: str = "busybox:test") -> Path:
    layer = busybox_layer()
    config = _config([_sha(layer)])
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [repo_tag], "Layers": ["layer/layer.tar"]}]
    with tarfile.open(path, "w") as tar:
        for name, data in (
            ("layer/layer.tar", layer),
            (config_name, config),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def write_oci_layout(directory: Path, tag: str = "v1") -> Path:
    """An OCI image layout with one gzip-compressed layer, tagged ``tag``."""
    layer = busybox_layer()
    compressed = gzip.compress(layer, mtime=0)
    config = _config([_sha(layer)])
    blobs = directory / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> str:
        digest = _sha(data)
        (blobs / digest[7:]).write_bytes(data)
        return digest

    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": put(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": put(compressed),
                    "size": len(compressed),
                }
            ],
        }
    ).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": put(manifest),
                "size": len(manifest),
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    (directory / "index.json").write_text(json.dumps(index))
    (directory / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return directory
