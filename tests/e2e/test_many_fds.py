"""A daemon holding more than 1,100 descriptors, as it does with a few hundred sandboxes, still does
everything a user asks: create (slot, nftables, runsc, the agent), exec and files, a network
policy change (an nft commit and conntrack), freeze and thaw, park and wake, fork, kill.

The daemon is started with 1,100 descriptors open already (``start_daemon(held_fds=...)``), so
every socket, pipe and file it opens is numbered above 1023. Before the nftables worker, a daemon
like this aborted in glibc on its first nft commit ("bit out of range 0 - FD_SETSIZE on
fd_set"): libnftables waits with ``select()``, which only takes descriptors below 1024. Any other
library on the daemon's paths that still does would abort it, or fail the call, here too.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from corral import Client
from tests.e2e.conftest import Daemon, running_daemon
from tests.e2e.workloads import assert_counting, read_count, start_counter, wait_until

HELD = 1100


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running_daemon(
        tmp_path_factory.mktemp("fds") / "data",
        "cf" + secrets.token_hex(2),
        extra_env={"CORRAL_FREEZE_IDLE_SECONDS": "1"},
        held_fds=HELD,
    ) as daemon:
        yield daemon


def test_every_sandbox_action_works_in_a_daemon_past_1024_descriptors(crowded: Daemon) -> None:
    assert len(os.listdir(f"/proc/{crowded.process.pid}/fd")) > HELD
    with Client(crowded.url, crowded.key) as client:
        sbx = client.create_sandbox(memory_mib=256)
        try:
            start_counter(sbx)
            sbx.files.write("/root/kept.txt", "kept")
            changed = sbx.network.update("airgapped", allow=["198.51.100.0/24:443"])
            assert changed.network.mode == "airgapped"
            assert sbx.exec("echo hi").stdout == "hi\n"

            before = read_count(sbx)
            wait_until(lambda: sbx.info().frozen, timeout=60, what="it to freeze")
            assert sbx.files.read("/root/kept.txt") == b"kept"  # thawed first
            assert_counting(sbx, before)

            assert sbx.park().state == "parked"
            assert sbx.wake().state == "running"
            assert_counting(sbx, before)
            children = sbx.fork(1)
            assert children[0].exec("cat /root/kept.txt").stdout == "kept"
            children[0].kill()
        finally:
            sbx.kill()
    assert crowded.process.poll() is None, crowded.log()[-3000:]
    assert "FD_SETSIZE" not in crowded.log()
