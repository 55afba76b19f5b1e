"""Lifecycle automation: a TTL that ends in park, idle auto-park, and auto-wake on use."""

from __future__ import annotations

import pytest

from corral import Client, Conflict
from tests.e2e.conftest import Daemon
from tests.e2e.workloads import assert_counting, read_count, start_counter, wait_until


def test_ttl_park_idle_park_and_auto_wake(daemon: Daemon) -> None:
    with Client(daemon.url, daemon.key) as client:
        idle = client.create_sandbox(memory_mib=256, auto_park_idle=2, auto_wake=True)
        # The TTL must outlast the counter's start even on a loaded host (a 3 s one ran out
        # before it under load 10), then it parks the sandbox on its own.
        expiring = client.create_sandbox(memory_mib=256, ttl_seconds=8, on_timeout="park")
        try:
            assert expiring.last_info.on_timeout == "park"
            start_counter(expiring)
            start_counter(idle)
            at_start = read_count(idle)

            wait_until(lambda: expiring.info().state == "parked", timeout=30, what="TTL park")
            assert expiring.info().expires_at is None  # parked for good, not killed later
            with pytest.raises(Conflict, match="parked"):
                expiring.exec("true")  # no auto_wake: a parked sandbox says so
            assert expiring.wake().state == "running"
            assert_counting(expiring, 1)

            wait_until(lambda: idle.info().state == "parked", timeout=20, what="idle park")
            # An exec wakes it first, and it continues where it was.
            assert idle.exec("echo awake").stdout == "awake\n"
            assert idle.info().state == "running"
            assert_counting(idle, at_start)
            idle.park()
            assert idle.files.read("/tmp/count")  # a file call wakes it too
            assert idle.info().state == "running"
        finally:
            expiring.kill()
            idle.kill()
