from __future__ import annotations

from pathlib import Path

from corral.runtime.cgroups import SandboxCgroups
from corral.runtime.layout import (
    SandboxPaths,
    SandboxRecord,
    container_id,
    is_container_of,
    valid_sandbox_id,
)
from corral.runtime.runsc import RunscOptions, RunscRunner


def test_container_ids_are_fixed_width_per_generation() -> None:
    assert container_id("sbx1", 1) == "sbx1-0001"
    assert container_id("sbx1", 42) == "sbx1-0042"
    assert container_id("sbx1", 9999) == "sbx1-9999"
    assert container_id("sbx1", 10000) == "sbx1-0001"  # wraps instead of growing a digit


def test_container_ownership_is_exact() -> None:
    assert is_container_of("sbx1", "sbx1-0003")
    assert not is_container_of("sbx1", "sbx1-x-0003")
    assert not is_container_of("sbx1", "sbx10-0003")
    assert not is_container_of("sbx1", "sbx1-00031")


def test_sandbox_ids_cannot_escape_the_root_dir() -> None:
    assert valid_sandbox_id("sbx-0001")
    for bad in ("", ".runsc", "../x", "a/b", "x" * 64):
        assert not valid_sandbox_id(bad)


def test_record_round_trip_and_disk_generations(tmp_path: Path) -> None:
    paths = SandboxPaths(tmp_path, "sbx1")
    assert paths.load() is None
    paths.dir.mkdir()
    record = SandboxRecord("sbx1", generation=3, container_ids=["sbx1-0002", "sbx1-0003"])
    paths.save(record)
    assert paths.load() == record
    assert record.current_container == "sbx1-0003"
    paths.disk_image(2).touch()
    paths.disk_mount(3).mkdir()
    assert paths.disk_generations() == [2, 3]


def test_oom_kills_from_cgroup_v1_and_v2(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    (v1 / "memory/corral/c-0001").mkdir(parents=True)
    (v1 / "memory/corral/c-0001/memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"
    )
    cgroups = SandboxCgroups("corral", root=v1)
    assert cgroups.oom_kills("c-0001") == 2
    assert cgroups.oom_kills("c-0002") == 0
    assert cgroups.path_for("c-0001") == "/corral/c-0001"

    v2 = tmp_path / "v2"
    (v2 / "corral/c-0001").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("memory pids\n")
    (v2 / "corral/c-0001/memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert SandboxCgroups("corral", root=v2).oom_kills("c-0001") == 1


def test_cpu_quota_lifted_and_set_on_cgroup_v1_and_v2(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    (v1 / "cpu/corral/c-0001").mkdir(parents=True)
    (v1 / "cpu/corral/c-0001/cpu.cfs_quota_us").write_text("50000\n")
    cgroups = SandboxCgroups("corral", root=v1)
    assert cgroups.cpu_quota("c-0001") == 50_000
    cgroups.set_cpu_quota("c-0001", None)
    assert (v1 / "cpu/corral/c-0001/cpu.cfs_quota_us").read_text() == "-1"
    assert cgroups.cpu_quota("c-0001") is None
    cgroups.set_cpu_quota("c-0001", 50_000)
    assert cgroups.cpu_quota("c-0001") == 50_000

    v2 = tmp_path / "v2"
    (v2 / "corral/c-0001").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory pids\n")
    (v2 / "corral/c-0001/cpu.max").write_text("50000 100000\n")
    cgroups = SandboxCgroups("corral", root=v2)
    assert cgroups.cpu_quota("c-0001") == 50_000
    cgroups.set_cpu_quota("c-0001", None)
    assert (v2 / "corral/c-0001/cpu.max").read_text() == "max"
    assert cgroups.cpu_quota("c-0001") is None


def test_known_container_ids_read_from_runsc_state_files(tmp_path: Path) -> None:
    root = tmp_path / ".runsc"
    root.mkdir()
    for name in ("a-0001_sandbox:a-0001.state", "a-0001_sandbox:a-0001.lock", "runsc-a-0001.sock"):
        (root / name).touch()
    (root / "b-0001_sandbox:b-0001.state").touch()
    runner = RunscRunner(RunscOptions(binary="runsc", root=root))
    assert runner.known_container_ids("a-") == ["a-0001"]
