"""The keys of the in-sandbox agents (``corral.agent.keys``): made, kept, and carried by images.

Every agent has a key of its own, 32 random bytes in hex, which the daemon alone knows. A cold
boot hands it to the agent on its stdin; a restored agent (wake, fork, warm template, memory
snapshot) wakes up with the key of the agent that was checkpointed and is rekeyed at once, so two
sandboxes never share a key.

Where keys live, and why:
- in memory (``AgentKeys._keys``) for every sandbox this daemon drives;
- in ``<data>/agent-keys/<sandbox id>`` (file 0600, dir 0700, written atomically) while the
  sandbox runs, because a restarted daemon must reconnect to the sandboxes that kept running.
  A file per sandbox rather than a column of the store: the store's rows are read by every
  listing and copied into records, a key should be read by nothing but the code that connects
  to the agent. Not fsynced: the page cache outlives a daemon that dies, and a host that dies
  ends every running sandbox (a parked one's key is in its image), so an fsync would save no
  sandbox that the written file does not, and each cost ms on the boot's event loop;
- in ``<image>/agent.key`` (0600) of every memory image (park, fork, warm template, snapshot),
  written before the checkpoint: restoring the image needs the key its agent has in memory. The
  whole image, this file with it, is fsynced before it is sealed into place (by the runtime,
  or by ``images.seal_image`` itself); an unsealed image is never restored. The image holds
  that agent's memory, key included, so the file beside it reveals nothing more and shares its
  protection (0600 files under 0700 dirs, never readable by another user).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["IMAGE_KEY_FILE", "AgentKeys", "new_agent_key"]

IMAGE_KEY_FILE = "agent.key"
_KEY_HEX = 64


def new_agent_key() -> str:
    return secrets.token_hex(_KEY_HEX // 2)


def _valid(key: str) -> bool:
    return len(key) == _KEY_HEX and all(c in "0123456789abcdef" for c in key)


def _write_private(path: Path, key: str) -> None:
    """Write ``key`` to ``path`` (0600) atomically (not fsynced: see the module docstring)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, f"{key}\n".encode())
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _read_key(path: Path) -> str | None:
    """The key in ``path``, or None (missing, not a regular file, or not a key)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not os.path.isfile(f"/proc/self/fd/{fd}"):
            return None
        key = os.read(fd, 256).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return key if _valid(key) else None


class AgentKeys:
    """The agent keys of one daemon (see the module docstring). Calls for one sandbox are
    serialized by the service's per-sandbox lock; the files of different sandboxes are disjoint."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._keys: dict[str, str] = {}

    def _path(self, sandbox_id: str) -> Path:
        if not sandbox_id or "/" in sandbox_id or sandbox_id.startswith("."):
            raise ValueError(f"invalid sandbox id {sandbox_id!r}")
        return self.dir / sandbox_id

    def issue(self, sandbox_id: str) -> str:
        """A new key for ``sandbox_id``, kept (and written) before any agent has it."""
        key = new_agent_key()
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        _write_private(self._path(sandbox_id), key)
        self._keys[sandbox_id] = key
        return key

    def get(self, sandbox_id: str) -> str | None:
        """The key of ``sandbox_id``'s agent (from memory, else from its file)."""
        key = self._keys.get(sandbox_id)
        if key is None:
            key = _read_key(self._path(sandbox_id))
            if key is not None:
                self._keys[sandbox_id] = key
        return key

    def forget(self, sandbox_id: str) -> None:
        """Drop the key of a sandbox whose agent is gone (killed, failed, parked)."""
        self._keys.pop(sandbox_id, None)
        with contextlib.suppress(OSError):  # gone already; callers must never fail on this
            self._path(sandbox_id).unlink()

    def put_in_image(self, sandbox_id: str, image_dir: Path) -> None:
        """Before checkpointing ``sandbox_id`` into ``image_dir``: write its key beside the
        memory it will be in (and make the dir 0700)."""
        key = self.get(sandbox_id)
        if key is None:
            raise KeyError(f"no agent key for sandbox {sandbox_id}")
        image_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(image_dir, 0o700)
        _write_private(image_dir / IMAGE_KEY_FILE, key)

    @staticmethod
    def of_image(image_dir: Path) -> str | None:
        """The key the agent in the memory image ``image_dir`` holds, or None."""
        return _read_key(image_dir / IMAGE_KEY_FILE)
