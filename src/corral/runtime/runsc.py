"""A thin async wrapper around the ``runsc`` command line: one method per verb.

It knows runsc's flags and quirks and nothing of sandboxes' host layout. Failures raise
``RunscError`` with the tail of runsc's stderr; the caller adds the verb-ing context.

Quirks handled here (DESIGN.md):
- ``run``/``restore -detach`` keep the caller's stdio: the container's stdout/stderr go to a log
  opened with O_APPEND (a non-append file is written from offset 0, and after a restore at the
  checkpointed offset), and runsc's own errors land in the same log, so they are read back from it.
- the same holds for stdin: ``run`` gives the container a pipe holding the agent's key
  (``corral.agent.keys``), written and closed before runsc starts, so only the init can read it;
  ``restore`` gets /dev/null (a restored agent keeps its memory and is rekeyed over the network).
- with a network namespace, runsc refuses to start from the root netns view of /proc/sys/net
  (gVisor issue 10704): run/restore start in a mount namespace of their own with a tmpfs over
  it, made by system call (``net_sysctl_hidden.py``).
- ``delete -force`` waits for the sandbox process to vanish: adopted zombies are reaped meanwhile.
- run/restore start runsc with ``GOMAXPROCS=1``: the gofer they leave behind inherits runsc's
  environment (the sentry gets none and sizes itself from ``--cpu-num``), and with directfs the
  gofer is idle after the start, so one P serves it; on 2 CPUs it held 0.4 MiB more per sandbox.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.timing import phase

from .host_commands import CommandError, run_command, stderr_tail
from .net_sysctl_hidden import run_with_net_sysctl_hidden
from .reaper import reaping

__all__ = ["NetworkMode", "RunscError", "RunscOptions", "RunscRunner"]

_NOT_FOUND_MARKERS = ("does not exist", "no such file or directory", "not found")


class RunscError(Exception):
    """A runsc command failed; the message is the tail of its error output."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


@dataclass(frozen=True)
class RunscOptions:
    """Global flags shared by every runsc invocation of one runtime."""

    binary: str
    root: Path
    platform: str = "systrap"
    debug_log_dir: Path | None = None
    timeout: float = 60.0


@dataclass(frozen=True)
class NetworkMode:
    """How a container is networked: ``netns_path`` None means ``--network=none``."""

    netns_path: str | None = None


def _boot_environment() -> dict[str, str]:
    """runsc's environment for run/restore: this process's, the gofer's Go runtime on one P."""
    return {**os.environ, "GOMAXPROCS": "1"}


def _is_not_found(message: str) -> bool:
    low = message.lower()
    return any(marker in low for marker in _NOT_FOUND_MARKERS)


class RunscRunner:
    """Runs runsc verbs for containers under one ``--root``."""

    def __init__(self, options: RunscOptions) -> None:
        self.options = options

    def _global(self) -> list[str]:
        flags = [self.options.binary, "--root", str(self.options.root)]
        if self.options.debug_log_dir is not None:
            # %ID% is not substituted in this runsc version: give a directory ending in "/".
            flags += ["--debug", f"--debug-log={self.options.debug_log_dir}/"]
        return flags

    def _boot_flags(
        self, network: NetworkMode, overlay_dir: Path | None, overlay_scope: str = "all"
    ) -> list[str]:
        # No overlay dir: writes go straight to the OCI root on the host (a build's own dir).
        # "all": writable bind mounts (/tmp) are overlaid too, their writes on the same disk;
        # "root" only for images checkpointed before /tmp moved to the disk.
        overlay = f"{overlay_scope}:dir={overlay_dir}" if overlay_dir is not None else "none"
        flags = [f"--platform={self.options.platform}", f"--overlay2={overlay}"]
        # The sentry's CPU count follows the cpuset, lowered to the quota but never below 2.
        flags.append("--cpu-num-from-quota")
        if network.netns_path:
            flags += ["--network=sandbox", "--net-disconnect-ok"]
        else:
            flags += ["--network=none"]
        return flags

    async def _call(self, args: list[str], *, timeout: float | None = None) -> bytes:
        argv = self._global() + args
        try:
            with phase(f"runsc {args[0]}"):
                result = await run_command(argv, timeout=timeout or self.options.timeout)
        except CommandError as exc:
            raise RunscError(str(exc), not_found=_is_not_found(str(exc))) from exc
        return result.stdout

    async def _boot(
        self,
        verb: str,
        verb_args: list[str],
        network: NetworkMode,
        log_path: Path,
        stdin_data: bytes | None = None,
    ) -> None:
        """Run a detaching verb (run/restore) with its stdout/stderr on the O_APPEND log and,
        with ``stdin_data``, its stdin on a pipe holding just that (else /dev/null)."""
        argv = self._global() + verb_args
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        stdin = subprocess.DEVNULL
        try:
            if stdin_data is not None:
                stdin = _pipe_holding(stdin_data)
            offset = os.fstat(fd).st_size
            try:
                with phase(f"runsc {verb}"):
                    env = _boot_environment()
                    timeout = self.options.timeout
                    if network.netns_path:
                        await run_with_net_sysctl_hidden(
                            argv, stdin=stdin, stdout=fd, stderr=fd, timeout=timeout, env=env
                        )
                    else:
                        await run_command(
                            argv, stdin=stdin, stdout=fd, stderr=fd, timeout=timeout, env=env
                        )
            except CommandError as exc:
                raise RunscError(_log_tail(log_path, offset) or str(exc)) from exc
        finally:
            os.close(fd)
            if stdin >= 0:
                os.close(stdin)

    async def run(
        self,
        container_id: str,
        bundle: Path,
        *,
        network: NetworkMode,
        overlay_dir: Path | None,
        log_path: Path,
        stdin_data: bytes | None = None,
    ) -> None:
        """``runsc run -detach``: returns once the container's init has been started; the init
        reads ``stdin_data`` (if given) from its stdin."""
        args = [*self._boot_flags(network, overlay_dir), "run", "-detach"]
        argv = [*args, "-bundle", str(bundle), container_id]
        await self._boot("run", argv, network, log_path, stdin_data)

    async def restore(
        self,
        container_id: str,
        bundle: Path,
        image_dir: Path,
        *,
        network: NetworkMode,
        overlay_dir: Path | None,
        log_path: Path,
        overlay_scope: str = "all",
    ) -> None:
        """``runsc restore -detach``: boot ``container_id`` from a checkpoint image."""
        args = [*self._boot_flags(network, overlay_dir, overlay_scope), "restore", "-detach"]
        args += ["--image-path", str(image_dir), "-bundle", str(bundle), container_id]
        await self._boot("restore", args, network, log_path)

    async def state(self, container_id: str) -> dict[str, Any] | None:
        """runsc's state document for the container, or None when runsc has no such container."""
        try:
            out = await self._call(["state", container_id])
        except RunscError as exc:
            if exc.not_found:
                return None
            raise
        doc: dict[str, Any] = json.loads(out)
        return doc

    def recorded_state(self, container_id: str) -> str | None:
        """The container's status from runsc's state file, without running runsc (~0.1 ms
        against ~25 ms for ``state``): "running" only while its sandbox process is alive.
        None when there is no state file. For the check right after run/restore."""
        try:
            with open(self.options.root / f"{container_id}_sandbox:{container_id}.state") as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            return None
        status = str(doc.get("status") or "")
        pid = (doc.get("sandbox") or {}).get("pid")
        if status == "running" and not (isinstance(pid, int) and _alive(pid)):
            return "stopped"
        return status

    async def checkpoint(
        self, container_id: str, image_dir: Path, *, leave_running: bool, compress: bool = True
    ) -> None:
        """``runsc checkpoint``; without ``compress``, the memory is written as it is
        (``--compression=none``: a pages file beside the state, larger on disk, restored
        without inflating it)."""
        # Parks, snapshots and forks compress, on purpose. `-compression none` (2026-12-03,
        # load 4-5, runsc on corral's configuration) restored 200 MB 170-250 ms sooner,
        # checkpointed it no faster in a steady way, and made its image 205 MiB instead of 1.6
        # (an idle sandbox's 2.7 MB instead of 0.65): all of it to fsync before a park or
        # snapshot may answer and to count against the workspace's disk. Raw runsc gains as
        # much from it, so it brings no ratio to raw closer. The sentry compresses without the
        # sandbox's CPU quota (``cpu_quota.py``): the quota was what made it slower than raw's.
        args = ["checkpoint", "--image-path", str(image_dir)]
        if not compress:
            args.append("--compression=none")
        if leave_running:
            args.append("--leave-running")
        await self._call([*args, container_id], timeout=max(self.options.timeout, 300.0))

    async def pause(self, container_id: str) -> None:
        await self._call(["pause", container_id])

    async def resume(self, container_id: str) -> None:
        await self._call(["resume", container_id])

    async def delete_force(self, container_id: str) -> None:
        """Kill and delete the container; a container runsc does not know is not an error."""
        async with reaping():
            try:
                await self._call(["delete", "-force", container_id])
            except RunscError as exc:
                if not exc.not_found:
                    raise

    def known_container_ids(self, prefix: str) -> list[str]:
        """Container ids under ``--root`` that start with ``prefix`` (read from runsc's state
        files, ``<id>_sandbox:<sandbox id>.state``, without running runsc)."""
        ids: set[str] = set()
        try:
            names = os.listdir(self.options.root)
        except FileNotFoundError:
            return []
        for name in names:
            if name.startswith(prefix) and name.endswith(".state"):
                ids.add(name.partition("_sandbox:")[0])
        return sorted(ids)


def _pipe_holding(data: bytes) -> int:
    """The read end of a pipe that holds ``data`` and then ends (its write end is closed)."""
    if len(data) > 4096:  # PIPE_BUF: one write, never blocking
        raise ValueError("stdin data for a container is limited to 4096 bytes")
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        os.write(write_end, data)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return read_end


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[:1] != ["Z"]
    except OSError:
        return False


def _log_tail(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return stderr_tail(fh.read())
    except OSError:
        return ""
