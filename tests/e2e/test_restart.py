"""Graceful shutdown leaves sandboxes running; the next daemon re-adopts them."""

from __future__ import annotations

import os
import secrets
import shutil

from corral import Sandbox
from corral.runtime.inject import GO_AGENT_BINARY
from tests.e2e.conftest import (
    Daemon,
    free_subnet,
    leftover_namespaces,
    start_daemon,
    stop_daemon,
)


def test_restart_readopts_running_sandboxes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    prefix = "cr" + secrets.token_hex(2)
    data = tmp_path / "data"
    subnet = free_subnet()
    first = start_daemon(data, prefix, subnet)
    try:
        sbx = Sandbox.create(url=first.url, api_key=first.key)
        bg = sbx.exec_background("sleep 1000")
        sbx.files.write("/tmp/keep.txt", "kept")
        stop_daemon(first, kill_sandboxes=False)

        second = start_daemon(data, prefix, subnet)
        try:
            again = Sandbox.connect(sbx.id, url=second.url, api_key=second.key)
            assert again.info().state == "running"
            assert again.files.read("/tmp/keep.txt") == b"kept"
            assert any(p.pid == bg.pid and p.running for p in again.processes())
            assert again.exec("echo back").stdout == "back\n"
            again.kill()
        finally:
            stop_daemon(second)
    finally:
        stop_daemon(first)
        assert not leftover_namespaces(prefix)


def test_a_sandbox_parked_under_one_agent_wakes_under_the_other(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Changing CORRAL_AGENT keeps every parked sandbox: all sandboxes have both agents mounted
    (runtime/inject.py), so a memory image restores under either setting and the agent it was
    checkpointed with runs on; new sandboxes get the agent now set."""
    prefix = "cx" + secrets.token_hex(2)
    data = tmp_path / "data"
    subnet = free_subnet()
    started: list[Daemon] = []

    def daemon_with(agent: str) -> Daemon:
        started.append(start_daemon(data, prefix, subnet, extra_env={"CORRAL_AGENT": agent}))
        return started[-1]

    def agent_of(sbx: Sandbox) -> str:
        return sbx.files.read("/proc/1/cmdline").decode()

    try:
        first = daemon_with("python")
        on_python = Sandbox.create(url=first.url, api_key=first.key, memory_mib=128)
        sleeper = on_python.exec_background("sleep 1000")
        assert "/.corral/agent/agent.py" in agent_of(on_python)
        on_python.park()
        stop_daemon(first, kill_sandboxes=False)

        second = daemon_with("go")
        on_python = Sandbox.connect(on_python.id, url=second.url, api_key=second.key)
        assert on_python.wake().state == "running"
        assert "/.corral/agent/agent.py" in agent_of(on_python)
        assert any(p.pid == sleeper.pid and p.running for p in on_python.processes())
        on_go = Sandbox.create(url=second.url, api_key=second.key, memory_mib=128)
        assert "/.corral/agent/builds/" in agent_of(on_go)
        on_go.files.write("/tmp/kept.txt", "kept")
        on_go.park()
        stop_daemon(second, kill_sandboxes=False)

        third = daemon_with("python")
        on_go = Sandbox.connect(on_go.id, url=third.url, api_key=third.key)
        assert on_go.wake().state == "running"
        assert "/.corral/agent/builds/" in agent_of(on_go)
        assert on_go.files.read("/tmp/kept.txt") == b"kept"
        assert on_go.exec("echo back").stdout == "back\n"
    finally:
        for daemon in reversed(started):
            stop_daemon(daemon)
        assert not leftover_namespaces(prefix)


def test_a_sandbox_parked_before_the_agent_was_rebuilt_wakes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An upgrade rebuilds the agent in place; a sandbox parked before it maps the old build in
    its memory image. Its wake under the next daemon (here: the binary rewritten with other
    code bytes, as a rebuild does) resumes it on the build it started from, processes and all;
    before the daemon kept its builds, that wake failed (the agent stopped at once)."""
    binary = tmp_path / "corral-agent"
    shutil.copyfile(GO_AGENT_BINARY, binary)
    binary.chmod(0o755)
    prefix = "cu" + secrets.token_hex(2)
    data = tmp_path / "data"
    subnet = free_subnet()
    env = {"CORRAL_AGENT_BINARY": str(binary)}
    first = start_daemon(data, prefix, subnet, extra_env=env)
    try:
        sbx = Sandbox.create(url=first.url, api_key=first.key)
        bg = sbx.exec_background("sleep 1000")
        sbx.park()
        stop_daemon(first, kill_sandboxes=False)

        # "Rebuilt": the same size, the middle of its code different (the new build is never
        # run here: a sandbox made now would run it).
        code = bytearray(binary.read_bytes())
        middle = len(code) // 2
        code[middle : middle + 65536] = bytes(b ^ 0xFF for b in code[middle : middle + 65536])
        rebuilt = tmp_path / "corral-agent.new"
        rebuilt.write_bytes(bytes(code))
        rebuilt.chmod(0o755)
        os.replace(rebuilt, binary)

        second = start_daemon(data, prefix, subnet, extra_env=env)
        try:
            again = Sandbox.connect(sbx.id, url=second.url, api_key=second.key)
            again.wake()
            assert any(p.pid == bg.pid and p.running for p in again.processes())
            assert again.exec("echo back").stdout == "back\n"
            again.kill()
        finally:
            stop_daemon(second)
    finally:
        stop_daemon(first)
        assert not leftover_namespaces(prefix)
