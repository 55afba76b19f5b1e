"""Warm templates and ready pools, as a user sees them.

A warm template's sandboxes start with the warmup's processes already running (an in-memory
counter keeps counting in each, independently); a pooled template hands out ready sandboxes that
count against capacity, refills in the background, and keeps its pool across a daemon restart.
"""

from __future__ import annotations

import json
import secrets
import time

import pytest

from corral import Sandbox
from corral.sdk.errors import InvalidRequest, QuotaExceeded

from .conftest import Daemon, free_subnet, leftover_namespaces, start_daemon, stop_daemon

pytestmark = pytest.mark.e2e

# A counter that lives only in memory; it writes its value out when asked (SIGUSR1).
COUNTER = (
    "python3 -c '\n"
    "import os, signal, time\n"
    'open("/tmp/counter.pid", "w").write(str(os.getpid()))\n'
    "n = 0\n"
    "def dump(*_):\n"
    '    open("/tmp/count", "w").write(str(n))\n'
    "signal.signal(signal.SIGUSR1, dump)\n"
    "while True:\n"
    "    n += 1\n"
    "    time.sleep(0.05)\n"
    "' >/dev/null 2>&1 & sleep 1"
)


def count(sbx: Sandbox) -> int:
    sbx.exec("kill -USR1 $(cat /tmp/counter.pid) && sleep 0.2")
    return int(sbx.files.read("/tmp/count"))


def build(daemon: Daemon, *args: str) -> None:
    out = daemon.cli("template", "create", *args, timeout=300)
    assert out.returncode == 0, out.stderr.decode()


def template_info(daemon: Daemon, name: str) -> dict[str, object]:
    out = daemon.cli("template", "info", name, "--json")
    assert out.returncode == 0, out.stderr.decode()
    info: dict[str, object] = json.loads(out.stdout)
    return info


def test_warm_template_starts_with_the_warmup_running(daemon: Daemon) -> None:
    name = "warm-" + secrets.token_hex(3)
    build(daemon, name, "--from", "base", "--memory", "256", "--warmup", COUNTER, "--warm")
    assert template_info(daemon, name)["warm_ready"] is True
    # Its memory is kept uncompressed (a pages file beside the state): every create restores it.
    (image,) = (daemon.data_dir / "warm").glob(f"{name}-*")
    assert (image / "pages.img").is_file()
    kw = {"url": daemon.url, "api_key": daemon.key}
    first = Sandbox.create(template=name, **kw)
    second = Sandbox.create(template=name, env={"GREETING": "hi"}, **kw)
    try:
        a1, b1 = count(first), count(second)
        # Restored mid-count: the warmup ran about a second before the checkpoint.
        assert a1 >= 10 and b1 >= 10
        first.exec("kill -STOP $(cat /tmp/counter.pid)")  # freeze one: they are independent
        time.sleep(0.5)
        assert count(second) > b1
        frozen = count(first)
        time.sleep(0.3)
        assert count(first) == frozen
        assert second.exec("echo $GREETING").stdout == "hi\n"  # env given after the restore
        with pytest.raises(InvalidRequest, match="warm"):
            Sandbox.create(template=name, memory_mib=512, **kw)
        # Its root's size is in the memory image too: `df /` would show the template's disk.
        assert first.exec("df -B1M --output=size / | tail -1").stdout.strip() == "2048"
        with pytest.raises(InvalidRequest, match="disk cannot be changed"):
            Sandbox.create(template=name, disk_mib=1024, **kw)
    finally:
        first.kill()
        second.kill()
    assert daemon.cli("template", "rm", name).returncode == 0


def test_failing_warmup_fails_the_build_and_leaves_no_template(daemon: Daemon) -> None:
    name = "badwarm-" + secrets.token_hex(3)
    out = daemon.cli(
        "template", "create", name, "--from", "base", "--warmup", "echo oops >&2; exit 7", "--warm"
    )
    assert out.returncode != 0
    assert b"exit code 7" in out.stderr and b"oops" in out.stderr
    listed = json.loads(daemon.cli("template", "ls", "--json").stdout)
    assert name not in [t["name"] for t in listed]
    # The warmup sandbox is gone too.
    assert not any(
        s["metadata"].get("corral.warmup") for s in json.loads(daemon.cli("ls", "--json").stdout)
    )


def test_pool_hands_out_ready_sandboxes_and_refills(daemon: Daemon) -> None:
    name = "pool-" + secrets.token_hex(3)
    before = json.loads(daemon.cli("capacity", "--json").stdout)["memory"]["reserved"]
    build(daemon, name, "--from", "base", "--memory", "128", "--pool", "2")
    deadline = time.monotonic() + 60
    while template_info(daemon, name)["pool_ready"] != 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert template_info(daemon, name)["pool_ready"] == 2
    reserved = json.loads(daemon.cli("capacity", "--json").stdout)["memory"]["reserved"]
    assert reserved == before + 2 * 128  # pooled sandboxes count against capacity
    listed = [s["template"] for s in json.loads(daemon.cli("ls", "--json").stdout)]
    assert name not in listed  # nobody's sandboxes yet

    kw = {"url": daemon.url, "api_key": daemon.key}
    started = time.monotonic()
    claimed = Sandbox.create(template=name, metadata={"who": "me"}, env={"X": "1"}, **kw)
    since_asked = time.monotonic() - started
    try:
        # Handed out from the pool: its kernel was up before the create was asked for.
        uptime = float(claimed.exec("cut -d' ' -f1 /proc/uptime").stdout)
        assert uptime > since_asked, (uptime, since_asked)
        assert claimed.exec("echo $X").stdout == "1\n"
        info = claimed.info()
        assert info.metadata == {"who": "me"} and info.state == "running"
        while template_info(daemon, name)["pool_ready"] != 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert template_info(daemon, name)["pool_ready"] == 2  # refilled
        # A claim counts against the claiming key's quotas like any create.
        out = daemon.cli(
            "key", "create", name, "--role", "member", "--quota", "running=1", "--json"
        )
        assert out.returncode == 0, out.stderr.decode()
        member = {"url": daemon.url, "api_key": json.loads(out.stdout)["key"]}
        mine = Sandbox.create(template=name, **member)
        try:
            assert mine.exec("echo mine").stdout == "mine\n"
            with pytest.raises(QuotaExceeded, match="running quota"):
                Sandbox.create(template=name, **member)
        finally:
            mine.kill()
            daemon.cli("key", "revoke", name)
    finally:
        claimed.kill()
    # Removing the template drains its pool rather than refusing.
    out = daemon.cli("template", "rm", name)
    assert out.returncode == 0, out.stderr.decode()
    after = json.loads(daemon.cli("capacity", "--json").stdout)["memory"]["reserved"]
    assert after == before


def test_pool_and_warm_image_survive_a_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    prefix = "cw" + secrets.token_hex(2)
    data = tmp_path / "data"
    subnet = free_subnet()
    first = start_daemon(data, prefix, subnet)
    second = None
    try:
        build(
            first,
            "wp",
            "--from",
            "base",
            "--memory",
            "128",
            "--pool",
            "1",
            "--warmup",
            COUNTER,
            "--warm",
        )
        deadline = time.monotonic() + 60
        while template_info(first, "wp")["pool_ready"] != 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        stop_daemon(first, kill_sandboxes=False)
        second = start_daemon(data, prefix, subnet)
        assert template_info(second, "wp")["pool_ready"] == 1
        sbx = Sandbox.create(template="wp", url=second.url, api_key=second.key)
        assert count(sbx) >= 10  # the warm processes came along
        sbx.kill()
    finally:
        if second is not None:
            stop_daemon(second)
        stop_daemon(first)
        assert not leftover_namespaces(prefix)
