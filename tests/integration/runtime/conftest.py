"""Harness for the gVisor runtime's integration tests: a runtime under a short private root dir,
a factory for specs whose init is a small Python script run by the base image's own python3 (the
image ./scripts/setup builds into the host-wide images dir), and a teardown that destroys every
sandbox and checks that nothing is left on the host (mounts, runsc containers, cgroups). Console
logs are printed at teardown so a failing test shows them.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from corral.images.store import ImageStore
from corral.runtime import AgentMount, GVisorRuntime, Resources, SandboxSpec
from corral.runtime.reaper import reap_adopted_zombies

# The prebuilt base image that ./scripts/setup makes, host-wide (read-only: sandboxes write to
# their own overlay). The same images dir as every daemon's default and the e2e harness's.
IMAGES_DIR = Path(os.environ.get("CORRAL_IMAGES_DIR", "/var/lib/corral/images"))
ROOTFS = ImageStore(IMAGES_DIR).rootfs("base") or IMAGES_DIR / "base" / "rootfs"
CGROUP_ROOT = Path("/sys/fs/cgroup")
_PR_SET_CHILD_SUBREAPER = 36

pytestmark = pytest.mark.integration


def _missing_prerequisite() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("runsc") is None:
        return "runsc is not installed"
    if not (ROOTFS / "usr/bin/python3").exists():
        return f"the base image (with python3) is missing at {ROOTFS}: run ./scripts/setup"
    return None


@pytest.fixture
def runtime_root() -> Iterator[Path]:
    # Short on purpose: runsc's unix socket path must fit in 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="crt-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def leftovers(root: Path, cgroup_parent: str) -> list[str]:
    """Host resources of any sandbox under ``root`` that are still there."""
    found: list[str] = []
    with open("/proc/self/mountinfo") as fh:
        found += [f"mount {line.split()[4]}" for line in fh if str(root) in line.split()[4]]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found += [f"loop {line}" for line in loops.splitlines() if str(root) in line]
    runsc_root = root / ".runsc"
    if runsc_root.exists():
        found += [f"runsc {name}" for name in os.listdir(runsc_root) if name.endswith(".state")]
    for controller in CGROUP_ROOT.iterdir():
        parent = controller / cgroup_parent
        if parent.is_dir():
            found += [f"cgroup {p}" for p in parent.iterdir() if p.is_dir()]
    found += [f"dir {p}" for p in root.iterdir() if not p.name.startswith(".")]
    return found


def _stop_being_subreaper() -> None:
    """Undo what ``GVisorRuntime`` did to this (the test) process: it made it a child subreaper,
    which a daemon needs but a test process must not stay. Otherwise the runsc processes of any
    later test's daemon that dies (the e2e crash tests SIGKILL theirs) are adopted by pytest, never
    reaped, and the restarted daemon's ``runsc delete`` waits on those zombies until it times out.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER, 0): {os.strerror(err)}")
    reap_adopted_zombies()


def _remove_cgroup_parent(cgroup_parent: str) -> None:
    for controller in CGROUP_ROOT.iterdir():
        parent = controller / cgroup_parent
        if parent.is_dir():
            for child in parent.iterdir():
                if child.is_dir():
                    child.rmdir()
            parent.rmdir()


@pytest.fixture
async def runtime(runtime_root: Path) -> AsyncIterator[GVisorRuntime]:
    reason = _missing_prerequisite()
    if reason:  # ./scripts/setup installs everything: missing pieces fail, never skip
        pytest.fail(reason)
    cgroup_parent = f"corral-test-{os.getpid()}"
    rt = GVisorRuntime(runtime_root, cgroup_parent=cgroup_parent)
    try:
        yield rt
    finally:
        for sandbox_id in await rt.list_ids():
            log = rt.paths(sandbox_id).console_log
            if log.exists():
                print(f"--- console of {sandbox_id} ---\n{log.read_text(errors='replace')[-4000:]}")
            await rt.destroy(sandbox_id)
        rt.close()  # its runsc state dir under /run/corral
        _stop_being_subreaper()
        left = leftovers(runtime_root, cgroup_parent)
        _remove_cgroup_parent(cgroup_parent)
        assert left == [], f"left on the host: {left}"


SpecFactory = Callable[..., SandboxSpec]


@pytest.fixture
def make_spec() -> SpecFactory:
    counter = iter(range(1, 1000))

    def factory(
        script: str,
        *,
        sandbox_id: str | None = None,
        memory_mib: int = 256,
        disk_mib: int = 64,
        pids: int = 256,
        cpu: float = 1.0,
        agent: AgentMount | None = None,
        netns_path: str | None = None,
    ) -> SandboxSpec:
        return SandboxSpec(
            sandbox_id=sandbox_id or f"it{next(counter):04d}",
            rootfs=ROOTFS,
            resources=Resources(cpu=cpu, memory_mib=memory_mib, disk_mib=disk_mib, pids=pids),
            agent=agent or AgentMount(mounts=(), argv=("/usr/bin/python3", "-u", "-c", script)),
            netns_path=netns_path,
        )

    return factory


async def wait_for_log(path: Path, pattern: str, timeout: float = 10.0) -> re.Match[str]:
    """Wait until the console log matches ``pattern``; fail with the log's tail if it never does."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        match = re.search(pattern, text, re.MULTILINE)
        if match:
            return match
        await asyncio.sleep(0.02)
    raise AssertionError(f"{pattern!r} never appeared in {path}:\n{text[-2000:]}")
