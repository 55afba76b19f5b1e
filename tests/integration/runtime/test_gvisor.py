"""The gVisor runtime against real runsc: scenarios a sandbox goes through, one per test."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from corral.agent import AGENT_DIR
from corral.runtime import GVisorRuntime, RuntimeFailure, RuntimeStatus
from corral.runtime.generation import DISK_ROOT_MARKER, disk_headroom_mib, memory_headroom_mib

from .conftest import ROOTFS, SpecFactory, wait_for_log

pytestmark = pytest.mark.integration


def on_disk_root(script: str) -> str:
    """``script`` run after what the agent does first (``agent/disk_root.py``, its own source):
    move onto the sized root the runtime mounted, drop CAP_SYS_ADMIN."""
    setup = (AGENT_DIR / "disk_root.py").read_text()
    return (
        f"{setup}\n"
        "enter_disk_root(os.environ['CORRAL_AGENT_DISK_ROOT'])\n"
        "drop_sys_admin()\n"
        f"{script}"
    )


COUNTER = """
import os, time
with open('/marker', 'w') as f:
    f.write('written before the checkpoint')
i = 0
while True:
    print('tick', i, os.path.exists('/marker'), flush=True)
    i += 1
    time.sleep(0.05)
"""


def ticks(log: Path) -> list[int]:
    return [int(m) for m in re.findall(r"^tick (\d+) True$", log.read_text(), re.MULTILINE)]


async def wait_for_status(
    rt: GVisorRuntime, sandbox_id: str, status: RuntimeStatus, timeout: float = 15.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (await rt.info(sandbox_id)).status is status:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{sandbox_id} never became {status}: {await rt.info(sandbox_id)}")


async def test_start_info_pause_destroy(runtime: GVisorRuntime, make_spec: SpecFactory) -> None:
    spec = make_spec(COUNTER)
    started = time.perf_counter()
    await runtime.start(spec)
    elapsed = time.perf_counter() - started
    print(f"start took {elapsed * 1000:.0f} ms")

    assert (await runtime.info(spec.sandbox_id)).status is RuntimeStatus.RUNNING
    assert await runtime.list_ids() == [spec.sandbox_id]
    await wait_for_log(runtime.paths(spec.sandbox_id).console_log, r"^tick 2 True$")

    await runtime.pause(spec.sandbox_id)
    assert (await runtime.info(spec.sandbox_id)).status is RuntimeStatus.PAUSED
    await runtime.resume(spec.sandbox_id)
    assert (await runtime.info(spec.sandbox_id)).status is RuntimeStatus.RUNNING

    await runtime.pause(spec.sandbox_id)  # destroy must also work on a paused sandbox
    started = time.perf_counter()
    await runtime.destroy(spec.sandbox_id)
    print(f"destroy took {(time.perf_counter() - started) * 1000:.0f} ms")
    assert (await runtime.info(spec.sandbox_id)).status is RuntimeStatus.MISSING
    assert await runtime.list_ids() == []
    await runtime.destroy(spec.sandbox_id)  # idempotent


async def test_info_sees_a_sandbox_end_by_itself_or_by_a_kill(
    runtime: GVisorRuntime, make_spec: SpecFactory
) -> None:
    # info() answers "running" from runsc's state file and /proc (no runsc process): an init that
    # returned, or a sandbox process killed on the host, must still show as stopped.
    ended = make_spec("print('done', flush=True)")
    await runtime.start(ended)
    await wait_for_status(runtime, ended.sandbox_id, RuntimeStatus.STOPPED)

    killed = make_spec(COUNTER)
    await runtime.start(killed)
    assert (await runtime.info(killed.sandbox_id)).status is RuntimeStatus.RUNNING
    await wait_for_log(runtime.paths(killed.sandbox_id).console_log, r"^tick 2 True$")
    cid = runtime.paths(killed.sandbox_id).load().current_container  # type: ignore[union-attr]
    state_file = runtime._runsc.options.root / f"{cid}_sandbox:{cid}.state"
    pid = json.loads(state_file.read_text())["sandbox"]["pid"]
    os.kill(pid, signal.SIGKILL)
    await wait_for_status(runtime, killed.sandbox_id, RuntimeStatus.STOPPED)
    for spec in (ended, killed):
        await runtime.destroy(spec.sandbox_id)
    assert await runtime.list_ids() == []


async def test_failed_start_leaves_nothing(runtime: GVisorRuntime, make_spec: SpecFactory) -> None:
    spec = make_spec("")
    broken = type(spec)(**{**spec.__dict__, "rootfs": Path("/nonexistent-rootfs")})
    with pytest.raises(RuntimeFailure, match=rf"starting sandbox {spec.sandbox_id}: "):
        await runtime.start(broken)
    assert await runtime.list_ids() == []
    assert (await runtime.info(spec.sandbox_id)).status is RuntimeStatus.MISSING


async def test_write_past_disk_size_gets_enospc(
    runtime: GVisorRuntime, make_spec: SpecFactory
) -> None:
    script = """
import errno
written = 0
try:
    with open('/big', 'wb') as f:
        while True:
            f.write(b'x' * (1 << 20))
            f.flush()
            written += 1
except OSError as exc:
    print('write failed', errno.errorcode[exc.errno], 'after', written, 'MiB', flush=True)
st = os.statvfs('/')
print('df', st.f_blocks * st.f_frsize, (st.f_blocks - st.f_bfree) * st.f_frsize, flush=True)
import time
time.sleep(60)
"""
    spec = make_spec(on_disk_root(script), disk_mib=32)
    await runtime.start(spec)
    match = await wait_for_log(
        runtime.paths(spec.sandbox_id).console_log, r"write failed (\w+) after (\d+) MiB"
    )
    assert match.group(1) == "ENOSPC"
    assert 10 <= int(match.group(2)) <= 32
    df = await wait_for_log(runtime.paths(spec.sandbox_id).console_log, r"df (\d+) (\d+)")
    assert df.group(1) == df.group(2) == str(32 << 20)  # df: size 32 MiB, all of it used
    assert not (ROOTFS / "big").exists()  # the template stays untouched
    # The host's count of the ext4 disk also holds its own metadata, within the headroom.
    assert 32 <= await runtime.disk_usage_mib(spec.sandbox_id) <= 32 + disk_headroom_mib(32)


async def test_memory_limit_kills_and_reports_oom(
    runtime: GVisorRuntime, make_spec: SpecFactory
) -> None:
    script = """
chunks = []
while True:
    chunks.append(bytearray(16 << 20))
    print('allocated', 16 * len(chunks), 'MiB', flush=True)
"""
    spec = make_spec(script, memory_mib=128)
    await runtime.start(spec)
    await wait_for_status(runtime, spec.sandbox_id, RuntimeStatus.STOPPED)
    info = await runtime.info(spec.sandbox_id)
    assert info.oom_killed, info
    allocated = re.findall(
        r"allocated (\d+) MiB", runtime.paths(spec.sandbox_id).console_log.read_text()
    )
    # Here the init is not the agent, so no OOM killer inside: the host cgroup stops the sandbox
    # once it passes its memory plus the headroom left for gVisor itself.
    assert allocated and int(allocated[-1]) <= 128 + memory_headroom_mib(128)


async def test_fork_bomb_stays_inside_the_pids_limit(
    runtime: GVisorRuntime, make_spec: SpecFactory
) -> None:
    script = """
import os, subprocess
print('bombing', flush=True)
subprocess.run(['/bin/sh', '-c', 'b() { b | b & }; b'])
import time
time.sleep(60)
"""
    spec = make_spec(script, pids=128, cpu=0.5)
    await runtime.start(spec)
    await wait_for_log(runtime.paths(spec.sandbox_id).console_log, "^bombing$")
    pids_current = Path(f"/sys/fs/cgroup/pids/{runtime._cgroups.parent}/{spec.sandbox_id}-0001")
    peak = 0
    for _ in range(30):
        if pids_current.exists():
            peak = max(peak, int((pids_current / "pids.current").read_text()))
        await asyncio.sleep(0.1)
    print(f"fork bomb: host pids peak {peak}")
    assert peak <= 128
    info = await runtime.info(spec.sandbox_id)
    print(f"fork bomb: sandbox {info}")
    assert info.status in (RuntimeStatus.RUNNING, RuntimeStatus.STOPPED), info
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork
    await runtime.destroy(spec.sandbox_id)


def cpu_quota(runtime: GVisorRuntime, sandbox_id: str) -> int | None:
    """The CFS quota (µs per 100 ms) of the sandbox's current container's cgroup."""
    record = runtime.paths(sandbox_id).load()
    assert record is not None
    return runtime._cgroups.cpu_quota(record.current_container)


async def test_checkpoint_and_restore_continue_the_process(
    runtime: GVisorRuntime, make_spec: SpecFactory, tmp_path: Path
) -> None:
    spec = make_spec(COUNTER, cpu=0.5)
    log = runtime.paths(spec.sandbox_id).console_log
    await runtime.start(spec)
    await wait_for_log(log, r"^tick 5 True$")
    assert cpu_quota(runtime, spec.sandbox_id) == 50_000

    image = tmp_path / "image"
    started = time.perf_counter()
    await runtime.checkpoint(spec.sandbox_id, image, leave_running=False)
    print(f"checkpoint took {(time.perf_counter() - started) * 1000:.0f} ms")
    info = await runtime.info(spec.sandbox_id)
    assert info.status is RuntimeStatus.STOPPED
    assert await runtime.disk_usage_mib(spec.sandbox_id) == 0
    last = ticks(log)[-1]

    started = time.perf_counter()
    await runtime.restore(spec, image)
    print(f"restore took {(time.perf_counter() - started) * 1000:.0f} ms")
    assert (await runtime.info(spec.sandbox_id)).status is RuntimeStatus.RUNNING
    # restored without a quota (runsc's own work), the sandbox has its own again
    assert cpu_quota(runtime, spec.sandbox_id) == 50_000
    await wait_for_log(log, rf"^tick {last + 5} True$")
    seen = ticks(log)
    assert seen == list(range(len(seen))), "the counter skipped or repeated across the restore"


async def test_fork_by_restoring_a_live_checkpoint(
    runtime: GVisorRuntime, make_spec: SpecFactory, tmp_path: Path
) -> None:
    parent = make_spec(COUNTER)
    await runtime.start(parent)
    parent_log = runtime.paths(parent.sandbox_id).console_log
    await wait_for_log(parent_log, r"^tick 3 True$")

    image = tmp_path / "fork"
    await runtime.checkpoint(parent.sandbox_id, image, leave_running=True)
    at_fork = ticks(parent_log)[-1]
    assert cpu_quota(runtime, parent.sandbox_id) == 100_000  # lifted only while checkpointing
    child = make_spec(COUNTER, cpu=0.5)
    await runtime.restore(child, image)
    assert cpu_quota(runtime, child.sandbox_id) == 50_000

    child_log = runtime.paths(child.sandbox_id).console_log
    first = int((await wait_for_log(child_log, r"^tick (\d+) True$")).group(1))
    assert at_fork <= first <= at_fork + 2
    await wait_for_log(parent_log, rf"^tick {at_fork + 5} True$")
    assert (await runtime.info(parent.sandbox_id)).status is RuntimeStatus.RUNNING
    assert (await runtime.info(child.sandbox_id)).status is RuntimeStatus.RUNNING


TMP_WRITER = """
import os, time
with open('/tmp/big', 'wb') as f:
    for _ in range(200):
        f.write(b'x' * (1 << 20))
i = 0
while True:
    print('tmp', i, os.path.getsize('/tmp/big'), flush=True)
    i += 1
    time.sleep(0.05)
"""


async def test_tmp_is_on_the_disk_and_in_the_checkpoint(
    runtime: GVisorRuntime, make_spec: SpecFactory, tmp_path: Path
) -> None:
    # 200 MiB in /tmp of a 96 MiB sandbox: on gVisor's tmpfs the host would stop it.
    spec = make_spec(on_disk_root(TMP_WRITER), memory_mib=96, disk_mib=512)
    log = runtime.paths(spec.sandbox_id).console_log
    await runtime.start(spec)
    await wait_for_log(log, rf"^tmp 3 {200 << 20}$", timeout=60)
    assert await runtime.disk_usage_mib(spec.sandbox_id) >= 200

    image = tmp_path / "image"
    await runtime.checkpoint(spec.sandbox_id, image, leave_running=False)
    assert (image / DISK_ROOT_MARKER).read_text() == "512\n"
    last = int(re.findall(r"^tmp (\d+) ", log.read_text(), re.MULTILINE)[-1])
    await runtime.restore(spec, image)
    await wait_for_log(log, rf"^tmp {last + 3} {200 << 20}$")
