"""A daemon killed (SIGKILL) in the middle of park, wake, fork or snapshot comes back with every
sandbox in a true state: running with its processes, or parked and wake-able with them, and
interrupted fork children or snapshots cleanly absent; nothing orphaned in runsc, no image lost.

The daemon's test hook ``CORRAL_CRASH_AT=<step>`` makes it SIGKILL itself at that step. Each case
runs its own daemon, crashes it, and restarts it without the hook on the same data dir.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import subprocess
from pathlib import Path

import httpx
import pytest

from corral import Client, Sandbox
from tests.e2e.conftest import (
    Daemon,
    free_subnet,
    leftover_namespaces,
    start_daemon,
    stop_daemon,
)
from tests.e2e.workloads import (
    assert_counting,
    is_running,
    read_count,
    start_counter,
    wait_until,
)

STEPS = [
    "park:before-checkpoint",
    "park:after-checkpoint",
    "park:after-image",
    "wake:before-restore",
    "wake:after-restore",
    "fork:before-checkpoint",
    "fork:after-checkpoint",
    "snapshot:before-checkpoint",
    "snapshot:after-checkpoint",
]


def runsc_root(data_dir: Path) -> str:
    """The daemon's runsc state root (keyed by its sandboxes dir; see runtime/gvisor.py)."""
    key = hashlib.sha256(str((data_dir / "sandboxes").resolve()).encode()).hexdigest()[:12]
    return f"/run/corral/{key}"


def runsc_containers(data_dir: Path) -> dict[str, str]:
    """Container id → status, as runsc itself lists them under the daemon's root."""
    listed = subprocess.run(
        ["runsc", "--root", runsc_root(data_dir), "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0 or not listed.stdout.strip():
        return {}
    return {c["id"]: c["status"] for c in json.loads(listed.stdout) or []}


def mounts_under(data_dir: Path) -> list[str]:
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts]
    return [point for point in points if point.startswith(str(data_dir.resolve()))]


def force_cleanup(data_dir: Path, prefix: str) -> list[str]:
    """Remove whatever a failed case left (containers, disk mounts, namespaces); say what."""
    left = []
    for container in runsc_containers(data_dir):
        left.append(f"container {container}")
        subprocess.run(
            ["runsc", "--root", runsc_root(data_dir), "delete", "-force", container], check=False
        )
    for point in reversed(mounts_under(data_dir)):
        left.append(f"mount {point}")
        subprocess.run(["umount", "--lazy", point], check=False)
    for name in leftover_namespaces(prefix):
        left.append(f"netns {name}")
        if name.startswith("nft:"):
            subprocess.run(["nft", "delete", "table", "inet", prefix], check=False)
        else:
            subprocess.run(["ip", "netns", "del", name], check=False)
    return left


def trigger(daemon: Daemon, step: str, sandbox_id: str) -> None:
    """Start the action of `step`; the daemon dies on the way, so the call fails."""
    action = step.split(":")[0]
    path = f"/v1/sandboxes/{sandbox_id}"
    request = {
        "park": ("POST", f"{path}/park", None),
        "wake": ("POST", f"{path}/wake", None),
        "fork": ("POST", f"{path}/fork", {"count": 2}),
        "snapshot": ("POST", f"{path}/snapshots", {"name": "crashed"}),
    }[action]
    with daemon.client() as http, pytest.raises(httpx.TransportError):
        http.request(request[0], request[1], json=request[2])
    assert daemon.process.wait(15) == -9, "the daemon should have killed itself at " + step


@pytest.mark.parametrize("step", STEPS)
def test_daemon_killed_mid_action_restarts_in_a_true_state(step: str, tmp_path: Path) -> None:
    prefix = "ck" + secrets.token_hex(2)
    subnet = free_subnet()
    data = tmp_path / "data"
    daemon = start_daemon(data, prefix, subnet, extra_env={"CORRAL_CRASH_AT": step})
    try:
        with Client(daemon.url, daemon.key) as client:
            sbx = client.create_sandbox(memory_mib=256)
            counter = start_counter(sbx)
            sbx.files.write("/root/kept.txt", "survives the crash")
            if step.startswith("wake:"):
                sbx.park()
            before = read_count(sbx) if not step.startswith("wake:") else 0
            trigger(daemon, step, sbx.id)

        daemon = start_daemon(data, prefix, subnet)
        with Client(daemon.url, daemon.key) as client:
            listed = client.list_sandboxes()
            assert [s.id for s in listed] == [sbx.id], "interrupted fork children must be gone"
            state = listed[0].state
            assert state in ("running", "parked"), f"{step}: {listed[0]}"
            assert [s.name for s in client.snapshots()] == []  # an unfinished one is dropped
            assert not list((data / "parked").glob("*.partial"))
            assert not list((data / "work").iterdir())
            if state == "parked":
                image = data / "parked" / sbx.id
                assert (image / ".complete").is_file(), f"{step}: the parked image was lost"
                assert runsc_containers(data) == {}
                assert client.sandbox(sbx.id).wake().state == "running"
            woken: Sandbox = client.sandbox(sbx.id)
            assert is_running(woken, counter)
            assert_counting(woken, before)
            assert woken.files.read("/root/kept.txt") == b"survives the crash"
            assert woken.exec("echo alive").stdout == "alive\n"
            containers = runsc_containers(data)
            assert list(containers.values()) == ["running"], containers
            assert all(c.startswith(sbx.id) for c in containers)
            # The action works once the daemon is back.
            if step.startswith("fork:"):
                for child in woken.fork(1):
                    assert_counting(child, before)
                    child.kill()
    finally:
        stop_daemon(daemon)
        left = force_cleanup(data, prefix)
        assert not left, f"left behind: {left}\n{daemon.log()[-3000:]}"


FREEZER = Path("/sys/fs/cgroup/freezer/corral")


def freezer_states(sandbox_id: str) -> list[str]:
    """The cgroup v1 freezer state of each of the sandbox's containers on the host."""
    return [
        (path / "freezer.state").read_text().strip()
        for path in sorted(FREEZER.glob(f"{sandbox_id}-*"))
        if (path / "freezer.state").exists()
    ]


def thaw_on_host(sandbox_id: str) -> None:
    """A frozen container cannot be deleted, even by SIGKILL (cgroup v1): thaw what a failed case
    left, before ``force_cleanup``."""
    for path in FREEZER.glob(f"{sandbox_id}-*"):
        with contextlib.suppress(OSError):
            (path / "freezer.state").write_text("THAWED")


def test_a_sandbox_frozen_when_the_daemon_was_killed_runs_after_a_restart(tmp_path: Path) -> None:
    prefix = "ck" + secrets.token_hex(2)
    subnet = free_subnet()
    data = tmp_path / "data"
    daemon = start_daemon(data, prefix, subnet, extra_env={"CORRAL_FREEZE_IDLE_SECONDS": "1"})
    sandbox_id = ""
    try:
        with Client(daemon.url, daemon.key) as client:
            sbx = client.create_sandbox(memory_mib=256)
            sandbox_id = sbx.id
            counter = start_counter(sbx)
            sbx.files.write("/root/kept.txt", "frozen through the crash")
            before = read_count(sbx)
            wait_until(lambda: sbx.info().frozen, timeout=60, what="it to freeze")
        daemon.process.kill()
        daemon.process.wait(15)
        assert freezer_states(sbx.id) == ["FROZEN"]  # the dead daemon left it frozen

        daemon = start_daemon(data, prefix, subnet)
        with Client(daemon.url, daemon.key) as client:
            again: Sandbox = client.sandbox(sbx.id)
            info = again.info()
            assert (info.state, info.frozen) == ("running", False)
            assert again.exec("echo back").stdout == "back\n"
            assert again.files.read("/root/kept.txt") == b"frozen through the crash"
            assert is_running(again, counter)
            assert_counting(again, before)  # resumed where it was, not restarted
            assert freezer_states(sbx.id) == ["THAWED"]
    finally:
        stop_daemon(daemon)
        if sandbox_id:
            thaw_on_host(sandbox_id)
        left = force_cleanup(data, prefix)
        assert not left, f"left behind: {left}\n{daemon.log()[-3000:]}"
