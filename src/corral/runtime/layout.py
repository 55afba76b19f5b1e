"""The on-host layout of one sandbox and its small state record.

::

    <root_dir>/<sandbox_id>/
        state.json          SandboxRecord: generation, runsc container ids still possibly alive
        bundle/config.json  the OCI spec of the current generation
        disk-NNNN.img       the sparse ext4 image of generation NNNN
        disk-NNNN/          its mount point, given to runsc as the overlay's backing dir
            root/           backs the sized tmpfs the agent moves the root onto (``bundle.py``)
        console/            a small tmpfs of its own (bounds the log; ``console.py``)
            console.log     the agent's stdout/stderr and runsc's own errors (O_APPEND)
        tmp/                empty forever (mode 1777): the lower layer of /tmp (older images only)
    /run/corral/<key>/      runsc's --root (state files, sockets; short: sun_path is 107 bytes)
    <root_dir>/.debug/      runsc debug logs when debugging is on

The runsc container id of generation N is ``<sandbox_id>-NNNN`` (fixed width: runsc matches ids
by prefix). Every restore is a new generation with a new container id and a fresh disk.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["SandboxPaths", "SandboxRecord", "container_id", "is_container_of", "valid_sandbox_id"]

_SANDBOX_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_GENERATIONS = 9999  # ids stay fixed-width: generation 10000 reuses slot 0001


def valid_sandbox_id(sandbox_id: str) -> bool:
    return _SANDBOX_ID.fullmatch(sandbox_id) is not None


def container_id(sandbox_id: str, generation: int) -> str:
    return f"{sandbox_id}-{(generation - 1) % _GENERATIONS + 1:04d}"


def is_container_of(sandbox_id: str, name: str) -> bool:
    """Whether ``name`` is a runsc container id of ``sandbox_id`` (of any generation)."""
    prefix = f"{sandbox_id}-"
    return name.startswith(prefix) and len(name) == len(prefix) + 4 and name[-4:].isdigit()


@dataclass
class SandboxRecord:
    """What the runtime remembers of a sandbox between calls (``state.json``).

    ``container_ids`` lists every runsc container of the sandbox that may still exist, the current
    generation's last; it is written *before* runsc is asked to make a container, so a crash never
    leaves a container nobody knows of. ``checkpointed`` is set once a checkpoint without
    ``leave_running`` has stopped the sandbox (its container and disk are gone then).
    ``disk_root_mib`` is the size of the sized root the current generation runs on (None: the
    image's root, as builds and sandboxes restored from older images have). ``cpu_quota_due``
    is the CFS quota the current container must get back: set (and saved) before runsc
    checkpoints or restores it without one, cleared once it has it again; a daemon that died
    in between finds it here and puts the quota back (``GVisorRuntime.info``).
    """

    sandbox_id: str
    generation: int
    container_ids: list[str] = field(default_factory=list)
    checkpointed: bool = False
    disk_root_mib: int | None = None
    cpu_quota_due: int | None = None

    @property
    def current_container(self) -> str:
        return container_id(self.sandbox_id, self.generation)


@dataclass(frozen=True)
class SandboxPaths:
    root_dir: Path
    sandbox_id: str

    @property
    def dir(self) -> Path:
        return self.root_dir / self.sandbox_id

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def bundle(self) -> Path:
        return self.dir / "bundle"

    @property
    def console_dir(self) -> Path:
        return self.dir / "console"

    @property
    def tmp_lower(self) -> Path:
        """The empty dir bind-mounted at ``/tmp`` of a sandbox restored from an image taken before
        the sized root; runsc's overlay takes every write to it."""
        return self.dir / "tmp"

    @property
    def console_log(self) -> Path:
        return self.console_dir / "console.log"

    def disk_image(self, generation: int) -> Path:
        return self.dir / f"disk-{generation:04d}.img"

    def disk_mount(self, generation: int) -> Path:
        return self.dir / f"disk-{generation:04d}"

    def disk_root_store(self, generation: int) -> Path:
        """Where runsc keeps the pages of the sized root of generation ``generation``."""
        return self.disk_mount(generation) / "root"

    def disk_generations(self) -> list[int]:
        """Generations that have a disk image or mount point in the sandbox dir."""
        found: set[int] = set()
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        for name in names:
            m = re.fullmatch(r"disk-(\d+)(\.img)?", name)
            if m:
                found.add(int(m.group(1)))
        return sorted(found)

    def load(self) -> SandboxRecord | None:
        try:
            data = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None
        return SandboxRecord(**data)

    def save(self, record: SandboxRecord) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(record)))
        os.replace(tmp, self.state_file)
