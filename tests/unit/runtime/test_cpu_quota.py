"""The CPU quota lifted while runsc checkpoints: put back after, and after a daemon that died."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.runtime.cgroups import SandboxCgroups
from corral.runtime.cpu_quota import CpuQuotaLifts
from corral.runtime.layout import SandboxPaths, SandboxRecord


@pytest.fixture
def host(tmp_path: Path) -> tuple[SandboxCgroups, SandboxPaths, Path]:
    """A v1 cgroup tree holding sandbox s1's first container with a quota of half a CPU, and
    its state record."""
    quota_file = tmp_path / "cg/cpu/corral/s1-0001/cpu.cfs_quota_us"
    quota_file.parent.mkdir(parents=True)
    quota_file.write_text("50000\n")
    paths = SandboxPaths(tmp_path / "sandboxes", "s1")
    paths.dir.mkdir(parents=True)
    paths.save(SandboxRecord("s1", generation=1))
    return SandboxCgroups("corral", root=tmp_path / "cg"), paths, quota_file


def loaded(paths: SandboxPaths) -> SandboxRecord:
    record = paths.load()
    assert record is not None
    return record


def test_a_checkpoint_runs_without_the_quota_and_gives_it_back(
    host: tuple[SandboxCgroups, SandboxPaths, Path],
) -> None:
    cgroups, paths, quota_file = host
    lifts = CpuQuotaLifts(cgroups)
    record = loaded(paths)
    with lifts.checkpointing(paths, record):
        assert quota_file.read_text() == "-1"
        assert loaded(paths).cpu_quota_due == 50_000  # saved before it ran without
        lifts.settle(paths, loaded(paths))  # the monitor's look meanwhile changes nothing
        assert quota_file.read_text() == "-1"
    assert quota_file.read_text() == "50000"
    assert loaded(paths).cpu_quota_due is None


def test_a_failed_checkpoint_gives_the_quota_back_too(
    host: tuple[SandboxCgroups, SandboxPaths, Path],
) -> None:
    cgroups, paths, quota_file = host
    with pytest.raises(RuntimeError), CpuQuotaLifts(cgroups).checkpointing(paths, loaded(paths)):
        raise RuntimeError("runsc checkpoint failed")
    assert quota_file.read_text() == "50000"
    assert loaded(paths).cpu_quota_due is None


def test_a_quota_a_dead_daemon_left_lifted_is_put_back_at_the_next_look(
    host: tuple[SandboxCgroups, SandboxPaths, Path],
) -> None:
    cgroups, paths, quota_file = host
    dying = CpuQuotaLifts(cgroups)
    lifted = dying.checkpointing(paths, loaded(paths))
    lifted.__enter__()  # the daemon dies here: the block never ends
    assert quota_file.read_text() == "-1"

    restarted = CpuQuotaLifts(cgroups)
    restarted.settle(paths, loaded(paths))
    assert quota_file.read_text() == "50000"
    assert loaded(paths).cpu_quota_due is None


def test_a_restore_in_progress_keeps_its_due_quota_for_itself(
    host: tuple[SandboxCgroups, SandboxPaths, Path],
) -> None:
    cgroups, paths, quota_file = host
    quota_file.write_text("-1")  # made without one, as a restore's container is
    record = loaded(paths)
    record.cpu_quota_due = 50_000
    paths.save(record)
    lifts = CpuQuotaLifts(cgroups)
    with lifts.restoring("s1"):
        lifts.settle(paths, loaded(paths))
        assert quota_file.read_text() == "-1"
    lifts.settle(paths, loaded(paths))  # a restore that never got to set it
    assert quota_file.read_text() == "50000"
