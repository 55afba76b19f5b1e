"""What a build's package installs take from the daemon host's own configuration.

A recipe's ``pip install`` or ``npm install`` runs inside the build sandbox, but the machine that
knows which index, mirror or corporate CA to use is the host. ``host_package_settings`` reads
the host's pip configuration files (and ``PIP_*`` variables) and npm's ``npmrc`` files, at build
time, and turns what a sandbox can use into environment variables for the build's steps plus the
files they name (a CA bundle is copied in; a ``file://`` index is not reachable from a sandbox and
is left out). Nothing here names a registry: without host settings the tools use their defaults.
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BUILD_CA_PATH", "HostPackageSettings", "host_package_settings"]

BUILD_CA_PATH = "/etc/corral-build/ca.pem"  # removed again at the end of the build
MAX_CA_BYTES = 4 * 1024 * 1024


@dataclass
class HostPackageSettings:
    """``env`` for build steps and ``files`` (sandbox path → content) they rely on."""

    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)


def _pip_config_files(environ: dict[str, str], home: Path, root: Path) -> list[Path]:
    # pip's own order (site-wide, then per-user; later wins), then PIP_CONFIG_FILE.
    files = [root / "etc/xdg/pip/pip.conf", root / "etc/pip.conf"]
    files += [home / ".pip" / "pip.conf", home / ".config" / "pip" / "pip.conf"]
    if environ.get("PIP_CONFIG_FILE"):
        files.append(Path(environ["PIP_CONFIG_FILE"]))
    return files


def _remote(urls: str) -> list[str]:
    return [u for u in urls.split() if u.startswith(("http://", "https://"))]


def _pip_settings(environ: dict[str, str], home: Path, root: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    parser = configparser.RawConfigParser()
    for path in _pip_config_files(environ, home, root):
        try:
            parser.read(path)
        except (configparser.Error, OSError):
            continue
    for section in ("global", "install"):
        if parser.has_section(section):
            for key in ("index-url", "extra-index-url", "trusted-host", "cert"):
                if parser.has_option(section, key):
                    found[key] = parser.get(section, key)
    for key in ("index-url", "extra-index-url", "trusted-host", "cert"):
        value = environ.get("PIP_" + key.upper().replace("-", "_"))
        if value:
            found[key] = value
    return found


def _npm_settings(environ: dict[str, str], home: Path, root: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in (root / "usr/etc/npmrc", root / "etc/npmrc", home / ".npmrc"):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() in ("registry", "cafile"):
                found[key.strip()] = value.strip()
    for key in ("registry", "cafile"):
        from_env = environ.get(f"NPM_CONFIG_{key.upper()}") or environ.get(f"npm_config_{key}")
        if from_env:
            found[key] = from_env
    return found


def _read_ca(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_CA_BYTES + 1)
    except OSError:
        return None
    return data if 0 < len(data) <= MAX_CA_BYTES and b"BEGIN CERTIFICATE" in data else None


def host_package_settings(
    environ: dict[str, str] | None = None, home: Path | None = None, root: Path = Path("/")
) -> HostPackageSettings:
    """The host's package settings as a build sandbox can use them (see the module docstring).
    ``environ``, ``home`` and ``root`` (where ``etc/`` is) default to this process's."""
    env_in = dict(os.environ if environ is None else environ)
    home_dir = home or Path(env_in.get("HOME") or "/root")
    out = HostPackageSettings()
    pip = _pip_settings(env_in, home_dir, root)
    if index := _remote(pip.get("index-url", "")):
        out.env["PIP_INDEX_URL"] = index[0]
    if extra := _remote(pip.get("extra-index-url", "")):
        out.env["PIP_EXTRA_INDEX_URL"] = " ".join(extra)
    if pip.get("trusted-host"):
        out.env["PIP_TRUSTED_HOST"] = " ".join(pip["trusted-host"].split())
    npm = _npm_settings(env_in, home_dir, root)
    if registry := _remote(npm.get("registry", "")):
        out.env["NPM_CONFIG_REGISTRY"] = registry[0]
    for wanted, names in (
        (pip.get("cert"), ("PIP_CERT", "REQUESTS_CA_BUNDLE")),
        (npm.get("cafile"), ("NPM_CONFIG_CAFILE", "NODE_EXTRA_CA_CERTS")),
    ):
        if not wanted:
            continue
        data = _read_ca(wanted)
        if data is None:
            continue
        if BUILD_CA_PATH in out.files and out.files[BUILD_CA_PATH] != data:
            out.files[BUILD_CA_PATH] += b"\n" + data
        else:
            out.files[BUILD_CA_PATH] = data
        for name in names:
            out.env[name] = BUILD_CA_PATH
    return out
