"""Graceful shutdown leaves sandboxes running; the next daemon re-adopts them."""

from __future__ import annotations

import secrets

from corral import Sandbox
from tests.e2e.conftest import free_subnet, leftover_namespaces, start_daemon, stop_daemon


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
