"""Inside a sandbox, as an agent sees it: /tmp on the sandbox's disk, its own CPU count and
memory, a runaway process killed while the rest lives on, a complete Python, and `ls` that
lists live sandboxes only."""

from __future__ import annotations

import json
import secrets

import pytest

from corral import Sandbox
from tests.e2e.conftest import Daemon, leftover_namespaces, start_daemon, stop_daemon
from tests.e2e.workloads import is_running, wait_until

MIB = 1024 * 1024


def sh(sbx: Sandbox, script: str, timeout: float = 120) -> str:
    result = sbx.exec(["sh", "-c", script], timeout=timeout)
    assert result.exit_code == 0, f"{script!r} exited {result.exit_code}: {result.stderr}"
    return result.stdout


def df(sbx: Sandbox, path: str) -> tuple[int, int]:
    """(size, used) in MiB that `df` shows for ``path``."""
    line = sh(sbx, f"df -B1M --output=size,used {path} | tail -1").split()
    return int(line[0].rstrip("M")), int(line[1].rstrip("M"))


def test_tmp_is_on_disk_past_memory_and_survives_park_wake_and_fork(daemon: Daemon) -> None:
    with Sandbox.create(
        url=daemon.url, api_key=daemon.key, memory_mib=256, disk_mib=1024, cpu=1
    ) as sbx:
        keeper = sbx.exec_background(["sleep", "3600"])
        # 400 MiB in /tmp of a 256 MiB sandbox: on a tmpfs this killed the whole sandbox.
        sh(sbx, "head -c 400M /dev/zero > /tmp/big && echo kept > /tmp/note")
        assert sh(sbx, "stat -c %s /tmp/big").strip() == str(400 * MIB)
        assert sh(sbx, "stat -c %a /tmp").strip() == "1777"
        assert is_running(sbx, keeper), "the sandbox lost its processes"
        # It counts against the disk: past the disk the write fails, the sandbox lives.
        full = sbx.exec(["sh", "-c", "head -c 900M /dev/zero > /tmp/more"], timeout=120)
        assert full.exit_code != 0 and "No space left on device" in full.stderr
        assert df(sbx, "/") == (1024, 1024)  # df tells why: the disk is full
        sh(sbx, "rm /tmp/more /tmp/big")
        size, used = df(sbx, "/")
        assert size == 1024 and used < 16, (size, used)
        assert is_running(sbx, keeper)

        sbx.park()
        sbx.wake()
        assert sh(sbx, "cat /tmp/note") == "kept\n"
        assert is_running(sbx, keeper)

        [child] = sbx.fork(1)
        with child:
            assert sh(child, "cat /tmp/note") == "kept\n"
            sh(child, "echo child > /tmp/note")
            assert sh(sbx, "cat /tmp/note") == "kept\n"  # each has its own /tmp


def test_df_nproc_free_show_the_sandbox_resources(daemon: Daemon) -> None:
    with Sandbox.create(
        url=daemon.url, api_key=daemon.key, memory_mib=384, disk_mib=1024, cpu=1
    ) as sbx:
        assert sh(sbx, "nproc").strip() == "1"
        assert sh(sbx, "python3 -c 'import os; print(os.cpu_count())'").strip() == "1"
        total = int(sh(sbx, "free -m | awk '/^Mem:/ {print $2}'"))
        assert total == 384
        # df shows the sandbox's disk, not gVisor's unbounded 8.0E; /tmp is on it, like /.
        size, before = df(sbx, "/")
        assert size == 1024 and before < 16, (size, before)
        sh(sbx, "head -c 64M /dev/zero > /tmp/f")
        assert df(sbx, "/tmp") == df(sbx, "/")
        size, used = df(sbx, "/")
        assert size == 1024 and 64 <= used - before <= 66, (size, before, used)
        human = sh(sbx, "df -h / | tail -1").split()
        assert human[1] == "1.0G", human
    with Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=256, cpu=0.5) as small:
        assert sh(small, "nproc").strip() == "1"


def test_memory_hog_is_killed_and_the_sandbox_lives_on(daemon: Daemon) -> None:
    with Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=256, cpu=1) as sbx:
        background = sbx.exec_background(["sleep", "3600"])
        # A single allocation of 600 MiB (bytes * n), the classic runaway.
        hog = sbx.exec(["python3", "-c", "x = b'x' * (600 << 20); print('survived')"], timeout=60)
        assert hog.exit_code == 137 and hog.signal == 9, (hog.exit_code, hog.stderr)
        assert "survived" not in hog.stdout
        assert "out of memory" in hog.stderr and "256 MiB" in hog.stderr
        # A hog that grows little by little, under a shell.
        grower = sbx.exec(
            [
                "sh",
                "-c",
                "python3 -c 'c = []\nwhile True: c.append(bytearray(8 << 20))'",
            ],
            timeout=60,
        )
        assert grower.exit_code == 137, (grower.exit_code, grower.stderr)
        assert "out of memory" in grower.stderr
        assert is_running(sbx, background), "the background process was killed too"
        assert sh(sbx, "echo still here") == "still here\n"
        assert sbx.info().state == "running"


def test_base_has_the_python_standard_library_and_tools(daemon: Daemon) -> None:
    with Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=256) as sbx:
        modules = [
            *("json", "http.client", "urllib.request", "ssl", "sqlite3", "zipfile", "tarfile"),
            *("csv", "decimal", "asyncio", "venv", "unittest", "xml.etree.ElementTree", "email"),
        ]
        out = sh(sbx, f"python3 -c 'import {', '.join(modules)}; print(\"ok\")'")
        assert out == "ok\n"
        for tool in ("curl --version", "less --version", "ps -e", "top -bn1", "free"):
            sh(sbx, tool)
        assert sh(sbx, "ls /etc/ssl/certs/ca-certificates.crt").strip()


def test_ls_lists_live_sandboxes_and_prunes_ended_ones(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    prefix = "cq" + secrets.token_hex(2)
    data_dir = tmp_path_factory.mktemp("prune") / "data"
    daemon = start_daemon(data_dir, prefix, extra_env={"CORRAL_ENDED_RETENTION_SECONDS": "15"})
    try:
        live = daemon.cli("new", "--json")
        gone = daemon.cli("new", "--json")
        assert live.returncode == 0 and gone.returncode == 0, live.stderr + gone.stderr
        live_id, gone_id = json.loads(live.stdout)["id"], json.loads(gone.stdout)["id"]
        assert daemon.cli("kill", gone_id).returncode == 0

        listed = json.loads(daemon.cli("ls", "--json").stdout)
        assert [s["id"] for s in listed] == [live_id]
        table = daemon.cli("ls").stdout.decode()
        assert live_id in table and gone_id not in table
        every = json.loads(daemon.cli("ls", "--all", "--json").stdout)
        assert {s["id"]: s["state"] for s in every} == {live_id: "running", gone_id: "killed"}
        everything = Sandbox.list(url=daemon.url, api_key=daemon.key, all=True)
        assert {s.id for s in everything} == {live_id, gone_id}

        # After the retention the daemon's monitor forgets the ended one.
        def pruned() -> bool:
            shown = json.loads(daemon.cli("ls", "--all", "--json").stdout)
            return [s["id"] for s in shown] == [live_id]

        wait_until(pruned, timeout=40, interval=0.5, what="the killed sandbox to be pruned")
        assert daemon.cli("info", gone_id).returncode != 0
        assert json.loads(daemon.cli("info", live_id, "--json").stdout)["state"] == "running"
    finally:
        stop_daemon(daemon)
    assert not leftover_namespaces(prefix), daemon.log()[-4000:]


def test_commands_cannot_mount_or_unshare(daemon: Daemon) -> None:
    """The agent holds CAP_SYS_ADMIN only to move the root onto the disk at start; neither it nor
    any process it starts keeps it, so nothing in the sandbox can mount or make a mount namespace.
    (A user namespace of its own is allowed, as on Linux: what it mounts there nobody else sees.)"""
    with Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=256) as sbx:
        for pid in ("self", "1"):
            status = sh(sbx, f"grep -E '^Cap(Bnd|Prm|Eff|Inh):' /proc/{pid}/status")
            for line in status.splitlines():
                assert not int(line.split()[1], 16) & (1 << 21), (pid, line)
        attempts = {
            "mount tmpfs": "mount -t tmpfs none /mnt",
            "bind mount": "mount --bind /etc /mnt",
            "remount the root": "mount -o remount,rw /",
            "unshare a mount namespace": "unshare -m true",
            "pivot_root": "mkdir -p /tmp/nr && pivot_root /tmp/nr /tmp/nr",
            "umount /proc": "umount -l /proc",
        }
        for what, command in attempts.items():
            tried = sbx.exec(["sh", "-c", command])
            assert tried.exit_code != 0, f"{what} succeeded: {tried.stdout} {tried.stderr}"
        # The raw disk the root was built on is out of reach: only an empty mount point is left.
        assert sh(sbx, "ls -A /.corral/disk") == ""
        assert sh(sbx, "cat /proc/mounts | awk '{print $2}'").split().count("/") == 1
