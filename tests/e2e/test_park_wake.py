"""Park and wake as a user sees them: same id, processes running again from where they were,
the reservation freed while parked, and nothing lost over repeated cycles."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from corral import Conflict, Sandbox
from corral.sdk import Process
from tests.e2e.conftest import Daemon, running_daemon
from tests.e2e.workloads import (
    ask_server,
    assert_counting,
    is_running,
    read_count,
    start_counter,
    start_server,
    wait_until,
)


def capacity(daemon: Daemon) -> dict[str, dict[str, float]]:
    result = daemon.cli("capacity", "--json")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_wake_brings_back_counter_server_and_stdin_waiter(daemon: Daemon) -> None:
    with Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=256, cpu=1) as sbx:
        counter = start_counter(sbx)
        server = start_server(sbx)
        waiter = sbx.exec_background(
            ["sh", "-c", "read line; echo got:$line; read more; echo then:$more"], stdin=True
        )
        sbx.files.write("/root/notes.txt", "before park")
        served_before = int(ask_server(sbx).split()[1])
        count_before = read_count(sbx)
        before = capacity(daemon)

        parked = sbx.park()
        assert (parked.id, parked.state) == (sbx.id, "parked")
        assert parked.image_mib > 0
        while_parked = capacity(daemon)
        assert while_parked["memory"]["reserved"] == before["memory"]["reserved"] - 256
        assert while_parked["cpu"]["reserved"] == before["cpu"]["reserved"] - 1
        assert while_parked["disk"]["reserved"] == (
            before["disk"]["reserved"] - parked.disk_mib + parked.image_mib
        )
        with pytest.raises(Conflict, match="parked"):
            sbx.exec("true")

        woken = sbx.wake()
        assert (woken.id, woken.state) == (sbx.id, "running")
        assert capacity(daemon)["memory"]["reserved"] == before["memory"]["reserved"]
        assert_counting(sbx, count_before)
        assert is_running(sbx, counter) and is_running(sbx, server)
        assert ask_server(sbx) == f"served {served_before + 1}"
        assert sbx.files.read("/root/notes.txt") == b"before park"

        assert is_running(sbx, waiter), "the stdin reader should still be waiting"
        waiter.send_stdin("after wake\n")
        sbx.park()
        sbx.wake()  # its output so far and its open stdin survive a second cycle too
        waiter.send_stdin("second\n")
        waiter.close_stdin()
        assert waiter.wait().stdout == "got:after wake\nthen:second\n"
        assert sbx.exec("echo still works").stdout == "still works\n"


# Holds one keep-alive connection to the sandbox's own agent and asks it GET /health on that
# same connection for every line read from stdin, printing the answer's status line.
AGENT_CLIENT = """
import socket, sys
conn = socket.create_connection(("127.0.0.1", 49983))
conn.settimeout(30)
for _ in sys.stdin:
    conn.sendall(b"GET /health HTTP/1.1\\r\\nHost: agent\\r\\n\\r\\n")
    print(conn.recv(4096).split(b"\\r\\n")[0].decode(), flush=True)
"""


def test_a_connection_to_the_agent_from_inside_is_answered_after_a_wake(daemon: Daemon) -> None:
    """A connection made inside the sandbox survives the checkpoint established, and the agent
    (Go by default: its connections wait in ppoll, not in an epoll instance saved by the
    checkpoint) answers the next request on it after the wake."""
    with Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=128) as sbx:
        client = sbx.exec_background(["python3", "-c", AGENT_CLIENT], stdin=True)
        client.send_stdin("\n")
        wait_until(lambda: stdout_so_far(client) == "HTTP/1.1 200 OK\n", what="first answer")
        sbx.park()
        sbx.wake()
        client.send_stdin("\n")
        wait_until(
            lambda: stdout_so_far(client) == "HTTP/1.1 200 OK\n" * 2,
            timeout=30,
            what="an answer on the same connection after the wake",
        )


def test_five_park_wake_cycles_keep_files_and_processes(daemon: Daemon) -> None:
    with Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=256) as sbx:
        counter = start_counter(sbx)
        last = read_count(sbx)
        for cycle in range(1, 6):
            sbx.files.write(f"/root/cycle-{cycle}", f"written in cycle {cycle}")
            sbx.exec(["sh", "-c", f"echo {cycle} >> /tmp/log"])
            assert sbx.park().state == "parked"
            assert sbx.wake().state == "running"
            last = assert_counting(sbx, last)
            assert is_running(sbx, counter)
            for earlier in range(1, cycle + 1):
                written = sbx.files.read(f"/root/cycle-{earlier}")
                assert written == f"written in cycle {earlier}".encode()
            logged = sbx.files.read("/tmp/log").split()
            assert logged == [str(n).encode() for n in range(1, cycle + 1)]
        assert [p.pid for p in sbx.processes() if p.running] == [counter.pid]


def stdout_so_far(process: Process) -> str:
    return b"".join(e.data for e in process.events(follow=False) if e.type == "stdout").decode()


def last_tick(process: Process) -> int:
    ticks = [int(line.split()[1]) for line in stdout_so_far(process).splitlines()]
    return max(ticks, default=0)


# The agent's own program, as /proc/1/cmdline shows it in the sandbox.
AGENT_PROGRAMS = {"go": "/.corral/agent/builds/", "python": "/.corral/agent/agent.py"}


@pytest.mark.parametrize("agent", ["go", "python"])
def test_each_agent_streams_and_feeds_processes_started_before_the_park(
    agent: str, tmp_path: Path
) -> None:
    """Whichever agent a daemon runs (CORRAL_AGENT), a woken sandbox answers, and a process
    started before the park keeps its output flowing and its stdin open through that agent.
    The daemon holds a connection to the agent while it parks, which gVisor resets during the
    checkpoint; a Go agent whose listener and pipes waited in the runtime's poller then heard
    none of them after the restore (src/corral/agent/go/listener.go)."""
    prefix = "cw" + secrets.token_hex(2)
    # An agent that never answers after the wake fails it within 90 s, saying so, rather than
    # after the default 300 s of a restore that keeps using CPU (past the test's own timeout).
    extra = {"CORRAL_AGENT": agent, "CORRAL_AGENT_READY_LIMIT": "90"}
    with (
        running_daemon(tmp_path / "data", prefix, extra_env=extra) as daemon,
        Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=256) as sbx,
    ):
        assert AGENT_PROGRAMS[agent] in sbx.files.read("/proc/1/cmdline").decode()
        ticker = sbx.exec_background(
            ["sh", "-c", "i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.1; done"]
        )
        echo = sbx.exec_background(
            ["sh", "-c", "while read line; do echo got:$line; done"], stdin=True
        )
        echo.send_stdin("before park\n")
        wait_until(lambda: stdout_so_far(echo) == "got:before park\n", what="the echo")
        wait_until(lambda: last_tick(ticker) >= 3, what="the ticker's output")

        ticked_before_park = last_tick(ticker)
        sbx.park()
        assert sbx.wake().state == "running"

        assert sbx.exec("echo answers").stdout == "answers\n"
        wait_until(lambda: last_tick(ticker) > ticked_before_park + 3, what="ticks after the wake")
        lines = stdout_so_far(ticker).splitlines()
        assert lines == [f"tick {n}" for n in range(1, len(lines) + 1)]  # one run, nothing lost
        echo.send_stdin("after wake\n")
        echo.close_stdin()
        assert echo.wait().stdout == "got:before park\ngot:after wake\n"
        ticker.kill()
        assert ticker.wait().signal == 9


def test_wake_of_a_running_sandbox_answers_it_running(daemon: Daemon) -> None:
    with Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=256) as sbx:
        counter = start_counter(sbx)
        assert sbx.wake().state == "running"
        assert is_running(sbx, counter)
        sbx.park()
        with pytest.raises(Conflict, match="parked"):
            sbx.park()
        assert sbx.wake().state == "running"


def test_park_that_might_not_fit_on_disk_is_refused_before_anything_changes(
    tmp_path: Path,
) -> None:
    import secrets

    from corral.sdk.errors import CapacityError
    from tests.e2e.conftest import leftover_namespaces, start_daemon, stop_daemon

    prefix = "cd" + secrets.token_hex(2)
    # 3000 MiB of workspace disk: a 2048 MiB sandbox leaves too little for a 1500 MiB image.
    daemon = start_daemon(tmp_path / "data", prefix, extra_env={"CORRAL_DISK_MIB": "3000"})
    try:
        kw = {"url": daemon.url, "api_key": daemon.key}
        holder = Sandbox.create(disk_mib=2048, memory_mib=128, **kw)
        big = Sandbox.create(disk_mib=256, memory_mib=1500, **kw)
        start_counter(big)
        with pytest.raises(CapacityError, match="cannot park") as refused:
            big.park()
        assert "1500 MiB memory" in str(refused.value)
        assert big.info().state == "running"
        before = assert_counting(big, read_count(big))
        holder.kill()
        assert big.park().state == "parked"  # with the disk back, it fits
        big.wake()
        assert_counting(big, before)
        big.kill()
    finally:
        stop_daemon(daemon)
        assert not leftover_namespaces(prefix)
