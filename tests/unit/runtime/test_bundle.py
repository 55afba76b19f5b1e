from __future__ import annotations

from pathlib import Path

from corral.runtime import AgentMount, Resources, SandboxSpec
from corral.runtime.bundle import (
    DISK_ROOT_PATH,
    DiskRoot,
    cpu_quota_us,
    render_config,
    write_config,
)


def spec(netns_path: str | None = None) -> SandboxSpec:
    return SandboxSpec(
        sandbox_id="sbx00001",
        rootfs=Path("/templates/base/rootfs"),
        resources=Resources(cpu=1.5, memory_mib=512, disk_mib=1024, pids=300),
        agent=AgentMount(
            mounts=(("/host/agent.py", "/.corral/agent/agent.py"),),
            argv=("/.corral/ld.so", "/.corral/py/bin/python3", "-I", "-S", "agent.py"),
            env=(("CORRAL_AGENT_PORT", "49983"),),
        ),
        netns_path=netns_path,
        annotations={"corral.template": "base"},
    )


def test_resources_and_cgroup_path() -> None:
    config = render_config(spec(), cgroups_path="/corral/sbx00001-0001")
    linux = config["linux"]
    assert linux["cgroupsPath"] == "/corral/sbx00001-0001"
    assert linux["resources"]["cpu"] == {"quota": 150_000, "period": 100_000}
    assert linux["resources"]["memory"]["limit"] == 512 * 1024 * 1024
    assert linux["resources"]["pids"] == {"limit": 300}


def test_a_restore_renders_no_cpu_quota_for_the_runtime_to_set_after() -> None:
    config = render_config(spec(), cgroups_path="/x", cpu_quota=False)
    assert config["linux"]["resources"]["cpu"] == {"period": 100_000}
    assert cpu_quota_us(1.5) == 150_000 and cpu_quota_us(0.001) == 1000


def test_root_is_the_shared_template_marked_writable_for_the_overlay() -> None:
    config = render_config(spec(), cgroups_path="/x")
    assert config["root"] == {"path": "/templates/base/rootfs", "readonly": False}
    assert config["annotations"] == {"corral.template": "base"}


def test_process_is_the_agent_without_ld_library_path() -> None:
    process = render_config(spec(), cgroups_path="/x")["process"]
    assert process["args"][0] == "/.corral/ld.so"
    assert process["cwd"] == "/"
    env = dict(item.split("=", 1) for item in process["env"])
    assert env["CORRAL_AGENT_PORT"] == "49983"
    assert "PATH" in env
    assert "LD_LIBRARY_PATH" not in env


def test_agent_mounts_are_read_only_binds() -> None:
    mounts = render_config(spec(), cgroups_path="/x")["mounts"]
    agent = [m for m in mounts if m["destination"] == "/.corral/agent/agent.py"]
    assert agent == [
        {
            "destination": "/.corral/agent/agent.py",
            "type": "bind",
            "source": "/host/agent.py",
            "options": ["rbind", "ro", "nosuid", "nodev"],
        }
    ]


def test_network_namespace_path_only_when_networked() -> None:
    def network(config: dict) -> dict:  # type: ignore[type-arg]
        return next(n for n in config["linux"]["namespaces"] if n["type"] == "network")

    assert network(render_config(spec(), cgroups_path="/x")) == {"type": "network"}
    networked = render_config(spec("/run/netns/sbx-1"), cgroups_path="/x")
    assert network(networked) == {"type": "network", "path": "/run/netns/sbx-1"}


def test_write_config_is_atomic_and_readable(tmp_path: Path) -> None:
    path = write_config(tmp_path / "bundle", {"ociVersion": "1.0.2"})
    assert path.read_text().startswith("{")
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.json"]


def test_tmp_is_an_overlaid_bind_of_the_given_dir_only_when_given() -> None:
    mounts = render_config(spec(), cgroups_path="/x", tmp_source="/s/sbx/tmp")["mounts"]
    tmp = [m for m in mounts if m["destination"] == "/tmp"]
    # rw on purpose: runsc overlays only writable binds, so writes go to the disk's filestore.
    assert tmp == [
        {
            "destination": "/tmp",
            "type": "bind",
            "source": "/s/sbx/tmp",
            "options": ["rbind", "rw", "nosuid", "nodev"],
        }
    ]
    plain = render_config(spec(), cgroups_path="/x")["mounts"]
    assert all(m["destination"] != "/tmp" for m in plain)


def test_disk_root_is_a_hinted_sized_tmpfs_and_only_then_cap_sys_admin() -> None:
    store = Path("/s/sbx/disk-0001/root")
    config = render_config(spec(), cgroups_path="/x", disk_root=DiskRoot(store, 1024))
    [disk] = [m for m in config["mounts"] if m["destination"] == DISK_ROOT_PATH]
    assert disk == {"destination": DISK_ROOT_PATH, "type": "bind", "source": str(store),
                    "options": ["rbind", "rw"]}  # fmt: skip
    # gVisor's mount hint: a tmpfs of the disk's size, its pages in a file in ``store``.
    hint = "dev.gvisor.spec.mount.corral-disk."
    assert config["annotations"] == {
        "corral.template": "base",
        hint + "source": str(store),
        hint + "type": "tmpfs",
        hint + "share": "container",
        hint + "options": "rw,size=1024m",
    }
    assert f"CORRAL_AGENT_DISK_ROOT={DISK_ROOT_PATH}" in config["process"]["env"]
    for kind in ("bounding", "effective", "permitted"):
        assert "CAP_SYS_ADMIN" in config["process"]["capabilities"][kind]

    plain = render_config(spec(), cgroups_path="/x")
    assert all(m["destination"] != DISK_ROOT_PATH for m in plain["mounts"])
    assert not any(e.startswith("CORRAL_AGENT_DISK_ROOT=") for e in plain["process"]["env"])
    for caps in plain["process"]["capabilities"].values():
        assert "CAP_SYS_ADMIN" not in caps


def test_the_agent_is_told_the_cpu_count_its_processes_see() -> None:
    env = render_config(spec(), cgroups_path="/x")["process"]["env"]
    assert "CORRAL_AGENT_CPUS=2" in env  # ceil(1.5)


def test_cpuset_is_set_only_when_given() -> None:
    cpu = render_config(spec(), cgroups_path="/x", cpuset="1")["linux"]["resources"]["cpu"]
    assert cpu == {"quota": 150_000, "period": 100_000, "cpus": "1"}
