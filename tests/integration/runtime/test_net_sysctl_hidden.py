"""Starting a program with /proc/sys/net hidden by system call (``runtime/net_sysctl_hidden.py``):
the program sees an empty /proc/sys/net, the daemon (every thread of it) and the host keep theirs,
and a failing or hung program is reported, the hung one killed."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from corral.runtime.host_commands import CommandError
from corral.runtime.net_sysctl_hidden import run_with_net_sysctl_hidden

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root"),
]

SYSCTL = "/proc/sys/net/core/rmem_default"


def run(argv: list[str], out: int = subprocess.DEVNULL, timeout: float = 30.0) -> None:
    asyncio.run(
        run_with_net_sysctl_hidden(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, timeout=timeout
        )
    )


def test_the_program_sees_no_net_sysctls_and_the_daemon_and_host_keep_them(
    tmp_path: Path,
) -> None:
    assert os.path.exists(SYSCTL)
    namespace = os.readlink("/proc/thread-self/ns/mnt")
    seen = tmp_path / "seen"
    with open(seen, "wb") as out:
        run(["sh", "-c", f"ls -A /proc/sys/net; test ! -e {SYSCTL} && echo hidden"], out.fileno())
    assert seen.read_text() == "hidden\n"
    assert os.path.exists(SYSCTL)  # the tmpfs did not reach this namespace
    assert os.readlink("/proc/thread-self/ns/mnt") == namespace
    mounts = Path("/proc/1/mountinfo").read_text()
    assert " /proc/sys/net " not in mounts  # nor the host's


def test_a_failing_program_raises_with_its_exit_status() -> None:
    with pytest.raises(CommandError, match="exit status 3"):
        run(["sh", "-c", "exit 3"])


def test_a_program_that_cannot_start_raises() -> None:
    with pytest.raises(CommandError, match="cannot run"):
        run(["/nonexistent/runsc"])


def test_a_hung_program_is_killed_at_its_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(CommandError, match="timed out"):
        run(["sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"], timeout=0.5)
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped


def test_the_program_gets_the_environment_it_is_given(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    with open(seen, "wb") as out:
        asyncio.run(
            run_with_net_sysctl_hidden(
                ["sh", "-c", 'echo "$GOMAXPROCS"'],
                stdin=subprocess.DEVNULL,
                stdout=out.fileno(),
                stderr=out.fileno(),
                timeout=30.0,
                env={"PATH": os.environ["PATH"], "GOMAXPROCS": "1"},
            )
        )
    assert seen.read_text() == "1\n"
