"""The CLI against a real daemon, as a user types it."""

from __future__ import annotations

import json

from tests.e2e.conftest import Daemon


def new_sandbox(daemon: Daemon, *args: str) -> str:
    out = daemon.cli("new", "--json", *args)
    assert out.returncode == 0, out.stderr.decode()
    created = json.loads(out.stdout)
    assert created["state"] == "running"
    return str(created["id"])


def test_new_exec_files_ls_kill(daemon: Daemon) -> None:
    sbx = new_sandbox(daemon, "--cpu", "1", "--memory", "256")

    out = daemon.cli("exec", sbx, "--", "python3", "-c", "print(6*7)")
    assert (out.returncode, out.stdout) == (0, b"42\n"), out.stderr

    out = daemon.cli("exec", sbx, "--", "sh", "-c", "echo oops >&2; exit 3")
    assert out.returncode == 3
    assert out.stderr == b"oops\n"

    out = daemon.cli(
        "exec",
        sbx,
        "--env",
        "GREETING=hi",
        "--cwd",
        "/tmp",
        "--",
        "sh",
        "-c",
        "echo $GREETING; pwd",
    )
    assert out.stdout == b"hi\n/tmp\n"

    payload = bytes(range(256)) * 1000
    out = daemon.cli("files", "write", sbx, "/tmp/blob.bin", input=payload)
    assert out.returncode == 0, out.stderr
    out = daemon.cli("files", "read", sbx, "/tmp/blob.bin")
    assert out.returncode == 0 and out.stdout == payload

    out = daemon.cli("files", "ls", sbx, "/tmp", "--json")
    assert out.returncode == 0, out.stderr
    assert "blob.bin" in out.stdout.decode()

    listed = json.loads(daemon.cli("ls", "--json").stdout)
    mine = [s for s in listed if s["id"] == sbx] if isinstance(listed, list) else []
    assert mine and mine[0]["state"] == "running" and mine[0]["memory_mib"] == 256

    table = daemon.cli("ls").stdout.decode()
    assert sbx in table and "running" in table

    info = json.loads(daemon.cli("info", sbx, "--json").stdout)
    assert info["id"] == sbx and info["cpu"] == 1

    assert daemon.cli("kill", sbx).returncode == 0
    info = json.loads(daemon.cli("info", sbx, "--json").stdout)
    assert info["state"] == "killed"

    again = daemon.cli("exec", sbx, "--", "true")
    assert again.returncode != 0
    assert b"killed" in again.stderr


def test_exec_timeout_and_missing_command(daemon: Daemon) -> None:
    sbx = new_sandbox(daemon)
    try:
        out = daemon.cli("exec", sbx, "--timeout", "1", "--", "sleep", "30")
        assert out.returncode == 124
        out = daemon.cli("exec", sbx, "--", "no-such-program")
        assert out.returncode == 127
        assert b"no-such-program" in out.stderr
    finally:
        daemon.cli("kill", sbx)


def test_capacity_json_and_refusal(daemon: Daemon) -> None:
    out = daemon.cli("capacity", "--json")
    assert out.returncode == 0, out.stderr
    cap = json.loads(out.stdout)
    assert set(cap) >= {"cpu", "memory", "disk", "cpu_overcommit"}
    for part in ("cpu", "memory", "disk"):
        assert set(cap[part]) >= {"total", "reserved", "free"}
    assert cap["cpu_overcommit"] == 8

    before = cap["memory"]["reserved"]
    sbx = new_sandbox(daemon, "--memory", "300")
    try:
        cap2 = json.loads(daemon.cli("capacity", "--json").stdout)
        assert cap2["memory"]["reserved"] == before + 300
    finally:
        daemon.cli("kill", sbx)
    cap3 = json.loads(daemon.cli("capacity", "--json").stdout)
    assert cap3["memory"]["reserved"] == before

    too_big = daemon.cli("new", "--memory", "99999999")
    assert too_big.returncode != 0
    assert b"memory" in too_big.stderr and b"99999999" in too_big.stderr


def test_unknown_ids_and_bad_key(daemon: Daemon) -> None:
    out = daemon.cli("exec", "sb-doesnotexist", "--", "true")
    assert out.returncode == 1 and b"not found" in out.stderr
    out = daemon.cli("info", "sb-doesnotexist")
    assert out.returncode == 1
    env_bad = daemon.cli("--api-key", "wrong", "ls")
    assert env_bad.returncode == 1
    assert b"key" in env_bad.stderr.lower()
    assert b"Traceback" not in env_bad.stderr


def test_unreachable_daemon_message(daemon: Daemon) -> None:
    out = daemon.cli("--url", "http://127.0.0.1:1", "ls")
    assert out.returncode == 1
    assert b"127.0.0.1:1" in out.stderr
    assert b"Traceback" not in out.stderr
