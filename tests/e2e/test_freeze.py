"""Idle freezing as a user sees it: a sandbox nobody calls is frozen (``info().frozen``) yet stays
``running``; any call thaws it first (exec, files, an inbound connection, park), and its processes
go on from where they were.

One private daemon for the module, with a freeze idle time of one second; every step waits for
the frozen condition instead of sleeping."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corral import Client, Sandbox
from tests.e2e.conftest import Daemon, running_daemon
from tests.e2e.workloads import assert_counting, read_count, start_counter, wait_until

HTTP_PORT = 8090


@pytest.fixture(scope="module")
def freezing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running_daemon(
        tmp_path_factory.mktemp("freeze") / "data",
        "cz" + secrets.token_hex(2),
        extra_env={"CORRAL_FREEZE_IDLE_SECONDS": "1"},
    ) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def sbx(freezing: Daemon) -> Iterator[Sandbox]:
    with Client(freezing.url, freezing.key) as client:
        sandbox = client.create_sandbox(memory_mib=256)
        try:
            yield sandbox
        finally:
            sandbox.kill()


def wait_frozen(sbx: Sandbox) -> None:
    info = wait_until(lambda: (i := sbx.info()).frozen and i, timeout=60, what="it to freeze")
    assert info.state == "running"


def test_exec_and_files_thaw_it_and_the_process_goes_on(sbx: Sandbox) -> None:
    start_counter(sbx)
    before = read_count(sbx)
    sbx.files.write("/root/kept.txt", "written before freezing")

    wait_frozen(sbx)
    assert sbx.exec("echo thawed").stdout == "thawed\n"
    assert_counting(sbx, before)  # not restarted: it resumed where it was

    wait_frozen(sbx)
    assert sbx.files.read("/root/kept.txt") == b"written before freezing"

    wait_frozen(sbx)
    assert [e.name for e in sbx.files.list("/root") if e.name == "kept.txt"] == ["kept.txt"]


def test_an_inbound_connection_thaws_it(sbx: Sandbox) -> None:
    sbx.exec_background(f"cd /root && python3 -m http.server {HTTP_PORT}")
    probe = f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {HTTP_PORT}), 1)'"
    wait_until(lambda: sbx.exec(probe).exit_code == 0, 60, what="the server to listen")
    opened = sbx.ports.open(HTTP_PORT)

    wait_frozen(sbx)
    answer = httpx.get(
        opened.path_url + "kept.txt", headers={"X-Corral-Token": opened.token or ""}, timeout=60
    )
    assert answer.status_code == 200, answer.text
    assert answer.text == "written before freezing"


def test_park_and_wake_of_a_frozen_sandbox(sbx: Sandbox, freezing: Daemon) -> None:
    before = read_count(sbx)
    wait_frozen(sbx)
    parked = sbx.park()
    assert parked.state == "parked"
    woken = sbx.wake()
    assert woken.state == "running"
    assert_counting(sbx, before)
    cli = freezing.cli("info", sbx.id)
    assert cli.returncode == 0, cli.stderr
    wait_frozen(sbx)
    shown = freezing.cli("info", sbx.id)
    assert b"running (frozen while idle)" in shown.stdout, shown.stdout
    assert Path(freezing.data_dir).exists()
