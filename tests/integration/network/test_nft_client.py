"""The nftables worker process as the daemon uses it (``network/nft_client.py``): it runs in the
caller's namespace, holds few descriptors, comes back after it died, and a worker that stops
answering fails the call instead of hanging it.

Only reads are sent (``list tables`` in this process's namespace, a lookup in a namespace the
test made with ``unshare``); each test has its own channel and closes it, and kills only the
worker pid that channel started.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterator

import pytest

from corral.network.namespaces import in_fresh_thread
from corral.network.nft_client import NftChannel, NftWorkerError

pytestmark = [pytest.mark.integration]

CLONE_NEWNET = 0x40000000


@pytest.fixture
def channel() -> Iterator[NftChannel]:
    made = NftChannel(timeout=5)
    try:
        yield made
    finally:
        made.close()


def worker(channel: NftChannel) -> int:
    pid = channel.worker_pid
    assert pid is not None
    return pid


def test_it_runs_in_the_callers_namespace(channel: NftChannel) -> None:
    rc, _, _ = channel.run("list tables")
    assert rc == 0

    def in_a_new_namespace() -> tuple[int, str, str]:
        # This fresh thread only, and it ends after.
        assert ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET) == 0
        return channel.run("add table inet zzfresh\nlist tables\n")

    rc, output, error = in_fresh_thread(in_a_new_namespace)
    assert (rc, error) == (0, "")
    assert output.split() == ["table", "inet", "zzfresh"]  # nothing else lives there
    assert "zzfresh" not in channel.run("list tables")[1]  # and nothing leaked into ours


def test_the_worker_holds_few_descriptors(channel: NftChannel) -> None:
    channel.run("list tables")
    fds = [int(name) for name in os.listdir(f"/proc/{worker(channel)}/fd")]
    assert max(fds) < 64, fds


def test_a_dead_worker_is_replaced_and_the_command_sent_again(channel: NftChannel) -> None:
    channel.run("list tables")
    first = worker(channel)
    os.kill(first, signal.SIGKILL)

    rc, _, _ = channel.run("list tables")
    assert rc == 0
    assert worker(channel) != first


def test_a_worker_that_does_not_answer_fails_the_call(channel: NftChannel) -> None:
    channel.run("list tables")
    stuck = worker(channel)
    os.kill(stuck, signal.SIGSTOP)
    try:
        with pytest.raises(NftWorkerError, match="did not answer within 5 s"):
            channel.run("list tables")
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed and reaped already
            os.kill(stuck, signal.SIGCONT)
    assert channel.worker_pid is None  # the stuck one was killed
    assert channel.run("list tables")[0] == 0
