"""Rendering the OCI runtime spec (``config.json``) of one sandbox container.

Pure functions: a ``SandboxSpec`` plus the container's cgroup path in, a JSON-ready dict out. The
process is the injected agent (cwd ``/``, root, Docker's default capabilities less three); the
root is the template's shared rootfs, marked writable because runsc puts its own overlay over it
(``--overlay2=all:dir=...``) and never writes the template itself.

Restored from an image taken before the sized root (below) existed, ``/tmp`` is a bind mount of
an empty host directory (``tmp_source``): runsc overlays it like the root, so its writes land in
the sandbox's disk-backed filestore, and gVisor does not mount its memory-backed tmpfs there (it
does so only when the spec has no ``/tmp``). On the sized root ``/tmp`` is a directory of it.

The sized root (``DiskRoot``): gVisor's overlay layers have no size, so ``df /`` would say 8.0E.
A bind mount at ``DISK_ROOT_PATH`` carries gVisor mount-hint annotations (``type=tmpfs``,
``share=container``, ``size=``) that make it a tmpfs of the sandbox's disk size whose pages live in
a file runsc creates in the mount's source dir, on the sandbox's ext4 disk. The agent, told the
path by ``CORRAL_AGENT_DISK_ROOT`` and granted CAP_SYS_ADMIN for it alone, overlays the root
with that tmpfs on top and pivots into it, then drops the capability (``agent/disk_root.py``).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import SandboxSpec

__all__ = [
    "CPU_PERIOD_US",
    "DEFAULT_PATH",
    "DISK_ROOT_PATH",
    "NOFILE_LIMIT",
    "DiskRoot",
    "cpu_quota_us",
    "render_config",
    "write_config",
]

CPU_PERIOD_US = 100_000
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_MIB = 1024 * 1024
# Open files per process: soft = hard, so nothing has to raise it. 65536 is ample for servers and
# builds (and for the agent: 3 pipes per tracked process, 1024 processes, its connections), while
# the former 1M let one process pin a million open files in the sandbox's kernel and made every
# "close all fds up to the limit" loop (daemons, older fork helpers) a million syscalls long.
NOFILE_LIMIT = 65536

# Docker's default set less what nothing here needs: enough for a root user inside the sandbox
# (setuid/su, chown, apt-get and pip, bind low ports). Dropped: CAP_NET_RAW (raw sockets: forged
# packets, ARP/ICMP tricks on the slot's link), CAP_MKNOD (device nodes) and CAP_SETFCAP (file
# capabilities: a build could leave a capability-bearing binary in a template).
_CAPABILITIES = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
]

# Where the sized tmpfs is mounted for the agent to move the root onto (gone from view after).
DISK_ROOT_PATH = "/.corral/disk"
_DISK_HINT = "dev.gvisor.spec.mount.corral-disk."


@dataclass(frozen=True)
class DiskRoot:
    """The sized root: ``size_mib`` of tmpfs whose pages runsc keeps in a file in ``store``."""

    store: Path
    size_mib: int


_BASE_MOUNTS: list[dict[str, Any]] = [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {
        "destination": "/dev",
        "type": "tmpfs",
        "source": "tmpfs",
        "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
    },
    {
        "destination": "/dev/pts",
        "type": "devpts",
        "source": "devpts",
        "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
    },
    {
        "destination": "/dev/shm",
        "type": "tmpfs",
        "source": "shm",
        "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
    },
    {
        "destination": "/sys",
        "type": "sysfs",
        "source": "sysfs",
        "options": ["nosuid", "noexec", "nodev", "ro"],
    },
]


def _environment(spec: SandboxSpec, disk_root: DiskRoot | None) -> list[str]:
    env = {"PATH": DEFAULT_PATH, "HOME": "/root", "HOSTNAME": spec.hostname}
    env.update(dict(spec.agent.env))
    # How many CPUs the sandbox's processes see; gVisor itself gets at least 2 (generation.py).
    env["CORRAL_AGENT_CPUS"] = str(max(1, math.ceil(spec.resources.cpu)))
    if disk_root is not None:
        env["CORRAL_AGENT_DISK_ROOT"] = DISK_ROOT_PATH
    return [f"{k}={v}" for k, v in env.items()]


def cpu_quota_us(cpu: float) -> int:
    """The CFS quota (µs per ``CPU_PERIOD_US``) of a sandbox of ``cpu`` vCPUs."""
    return max(1000, round(cpu * CPU_PERIOD_US))


def _resources(spec: SandboxSpec, cpuset: str | None, cpu_quota: bool) -> dict[str, Any]:
    res = spec.resources
    memory = res.memory_mib * _MIB
    cpu: dict[str, Any] = {"period": CPU_PERIOD_US}
    if cpu_quota:
        cpu["quota"] = cpu_quota_us(res.cpu)
    if cpuset:
        cpu["cpus"] = cpuset  # runsc sizes the sentry's CPU count (and GOMAXPROCS) by it
    return {
        "cpu": cpu,
        "memory": {"limit": memory, "swap": memory},
        "pids": {"limit": res.pids},
    }


def _tmp_mount(source: str) -> dict[str, Any]:
    return {
        "destination": "/tmp",
        "type": "bind",
        "source": source,
        "options": ["rbind", "rw", "nosuid", "nodev"],
    }


def _disk_root_mount(disk_root: DiskRoot) -> dict[str, Any]:
    return {
        "destination": DISK_ROOT_PATH,
        "type": "bind",
        "source": str(disk_root.store),
        "options": ["rbind", "rw"],
    }


def _disk_root_hint(disk_root: DiskRoot) -> dict[str, str]:
    return {
        _DISK_HINT + "source": str(disk_root.store),
        _DISK_HINT + "type": "tmpfs",
        _DISK_HINT + "share": "container",
        _DISK_HINT + "options": f"rw,size={disk_root.size_mib}m",
    }


def _resolv_mount(source: str) -> dict[str, Any]:
    return {
        "destination": "/etc/resolv.conf",
        "type": "bind",
        "source": source,
        "options": ["bind", "ro", "nosuid", "nodev", "noexec"],
    }


def render_config(
    spec: SandboxSpec,
    *,
    cgroups_path: str,
    tmp_source: str | None = None,
    cpuset: str | None = None,
    disk_root: DiskRoot | None = None,
    cpu_quota: bool = True,
) -> dict[str, Any]:
    """The OCI ``config.json`` for ``spec``'s container, whose cgroups live at ``cgroups_path``.

    ``tmp_source`` is the empty host dir mounted (overlaid) at ``/tmp``; ``cpuset`` the host
    CPUs the sandbox may run on (``"0"``, ``"0-1"``), None for all; ``disk_root`` the sized root
    the agent moves onto (None: it stays on the image's root). Without ``cpu_quota`` the
    container starts with no CPU quota: the caller sets it (``cpu_quota_us``) once runsc is done
    restoring, work of runsc's own that the sandbox's quota should not slow."""
    capabilities = [*_CAPABILITIES, *(["CAP_SYS_ADMIN"] if disk_root is not None else [])]
    network: dict[str, str] = {"type": "network"}
    if spec.netns_path:
        network["path"] = spec.netns_path
    agent_mounts = [
        {
            "destination": dest,
            "type": "bind",
            "source": source,
            "options": ["rbind", "ro", "nosuid", "nodev"],
        }
        for source, dest in spec.agent.mounts
    ]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(spec.agent.argv),
            "env": _environment(spec, disk_root),
            "cwd": "/",
            "capabilities": {
                kind: list(capabilities) for kind in ("bounding", "effective", "permitted")
            },
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": NOFILE_LIMIT, "soft": NOFILE_LIMIT}],
        },
        "root": {"path": str(spec.rootfs), "readonly": False},
        "hostname": spec.hostname,
        "mounts": [
            *_BASE_MOUNTS,
            *([_tmp_mount(tmp_source)] if tmp_source else []),
            *([_disk_root_mount(disk_root)] if disk_root is not None else []),
            *agent_mounts,
            *([_resolv_mount(spec.resolv_conf)] if spec.resolv_conf else []),
        ],
        "annotations": {
            **dict(spec.annotations),
            **(_disk_root_hint(disk_root) if disk_root is not None else {}),
        },
        "linux": {
            "namespaces": [
                {"type": "pid"},
                {"type": "ipc"},
                {"type": "uts"},
                {"type": "mount"},
                network,
            ],
            "cgroupsPath": cgroups_path,
            "resources": _resources(spec, cpuset, cpu_quota),
        },
    }


def write_config(bundle_dir: Path, config: dict[str, Any]) -> Path:
    """Write ``config.json`` into ``bundle_dir`` atomically; return its path."""
    bundle_dir.mkdir(parents=True, exist_ok=True)
    path = bundle_dir / "config.json"
    tmp = bundle_dir / "config.json.tmp"
    tmp.write_text(json.dumps(config, indent=1))
    os.replace(tmp, path)
    return path
