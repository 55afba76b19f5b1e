"""Sandbox metrics: a sample of a running sandbox, none of a stopped one; cgroup files read."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.runtime.cgroups import SandboxCgroups
from corral.service.errors import StateConflict
from corral.service.sandboxes import CreateRequest
from tests.unit.conftest import Harness

MIB = 1024 * 1024


async def test_a_running_sandbox_has_a_sample(harness: Harness) -> None:
    ws = harness.workspace
    record = await ws.creator.create(CreateRequest(memory_mib=300, cpu=1.5))
    first = await ws.metrics.sample(record.id)
    assert (first.cpu_count, first.mem_total, first.disk_total) == (1.5, 300 * MIB, 512 * MIB)
    assert first.mem_used > 1 * MIB  # the agent process's resident memory
    assert 0.0 <= first.cpu_used_pct <= 100.0
    second = await ws.metrics.sample(record.id)
    assert second.timestamp >= first.timestamp
    await ws.sandboxes.kill(record.id)
    with pytest.raises(StateConflict, match="only a running sandbox has metrics"):
        await ws.metrics.sample(record.id)


def test_usage_from_cgroup_v1_and_v2_files(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    (v1 / "cpuacct" / "corral" / "c1").mkdir(parents=True)
    (v1 / "memory" / "corral" / "c1").mkdir(parents=True)
    (v1 / "cpuacct" / "corral" / "c1" / "cpuacct.usage").write_text("2500000000\n")
    (v1 / "memory" / "corral" / "c1" / "memory.usage_in_bytes").write_text("4096\n")
    (v1 / "memory" / "corral" / "c1" / "memory.stat").write_text("cache 1\ntotal_cache 1024\n")
    usage = SandboxCgroups("corral", v1).usage("c1")
    assert usage is not None
    assert (usage.cpu_seconds, usage.memory_bytes, usage.cache_bytes) == (2.5, 4096, 1024)
    assert SandboxCgroups("corral", v1).usage("gone") is None

    v2 = tmp_path / "v2"
    (v2 / "corral" / "c1").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    (v2 / "corral" / "c1" / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1\n")
    (v2 / "corral" / "c1" / "memory.current").write_text("8192\n")
    (v2 / "corral" / "c1" / "memory.stat").write_text("anon 1\nfile 512\n")
    usage = SandboxCgroups("corral", v2).usage("c1")
    assert usage is not None
    assert (usage.cpu_seconds, usage.memory_bytes, usage.cache_bytes) == (1.5, 8192, 512)
