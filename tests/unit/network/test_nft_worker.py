"""The nftables worker's request handling without the kernel (``network/nft_worker.py``): a fake
libnftables context stands in for the real one, so what is checked is who frees it."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from corral.network import nft_worker


class FakeLibc:
    def setns(self, fd: int, kind: int) -> int:
        return 0


class FakeContext:
    freed_in: list[str] = []

    def set_json_output(self, value: bool) -> None:
        pass

    def cmd(self, commands: str) -> tuple[int, str, str]:
        return 0, "", ""

    def __del__(self) -> None:
        FakeContext.freed_in.append(threading.current_thread().name)


def test_a_committed_context_is_freed_off_the_answering_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Freeing a context that committed waits for an RCU grace period; the worker answers
    first, so the free must happen in its background thread, never in the answering one."""
    handed: list[int] = []
    threads: list[threading.Thread] = []
    real_free = nft_worker._free_in_background

    def free(holder: list[Any]) -> None:
        # References to the context beyond the holder's own and this call's argument: any
        # other is the worker's, and its release would free the context in the worker.
        handed.append(sys.getrefcount(holder[0]) - 2)
        before = set(threading.enumerate())
        real_free(holder)
        threads.extend(set(threading.enumerate()) - before)

    monkeypatch.setattr(nft_worker.nftables, "Nftables", FakeContext)
    monkeypatch.setattr(nft_worker, "_free_in_background", free)
    FakeContext.freed_in.clear()
    answer = nft_worker._execute(FakeLibc(), 0, {"commands": "list tables", "json": False})  # type: ignore[arg-type]
    for thread in threads:
        thread.join(5)
    assert answer == {"rc": 0, "output": "", "error": ""}
    assert handed == [0]
    assert FakeContext.freed_in == ["nft-free"]
