"""The nftables worker's request handling without the kernel (``network/nft_worker.py``): a fake
libnftables stands in for the real one, so what is checked is who frees a context, and when."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from corral.network import nft_worker


class FakeFunction:
    def __init__(self, call: Any) -> None:
        self.call = call
        self.restype: Any = None
        self.argtypes: Any = None

    def __call__(self, *args: Any) -> Any:
        return self.call(*args)


class FakeLib:
    """libnftables as far as the worker uses it; ``nft_ctx_free`` in the freeing thread waits
    for ``release``."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.freeing = threading.Event()
        self.two_freed = threading.Event()
        self.freed: list[tuple[int, str]] = []
        self.flags: dict[int, int] = {}
        self.ran: list[bytes] = []
        self.contexts = iter(range(1, 1000))

        def free(context: int) -> None:
            if threading.current_thread().name == "nft-free":
                self.freeing.set()
                self.release.wait(10)
            self.freed.append((context, threading.current_thread().name))
            if len(self.freed) == 2:
                self.two_freed.set()

        def run(context: int, commands: bytes) -> int:
            self.ran.append(commands)
            return 0

        self.nft_ctx_new = FakeFunction(lambda flags: next(self.contexts))
        self.nft_ctx_free = FakeFunction(free)
        self.nft_ctx_buffer_output = FakeFunction(lambda context: 0)
        self.nft_ctx_buffer_error = FakeFunction(lambda context: 0)
        self.nft_ctx_get_output_buffer = FakeFunction(lambda context: b"out")
        self.nft_ctx_get_error_buffer = FakeFunction(lambda context: b"")
        self.nft_ctx_output_get_flags = FakeFunction(lambda context: self.flags.get(context, 0))
        self.nft_ctx_output_set_flags = FakeFunction(
            lambda context, flags: self.flags.__setitem__(context, flags)
        )
        self.nft_run_cmd_from_buffer = FakeFunction(run)


class FakeLibc:
    def setns(self, fd: int, kind: int) -> int:
        return 0


@pytest.fixture
def lib(monkeypatch: pytest.MonkeyPatch) -> FakeLib:
    fake = FakeLib()
    monkeypatch.setattr(nft_worker.ctypes, "CDLL", lambda name: fake)
    return fake


def test_the_answer_does_not_wait_for_its_context_to_be_freed(lib: FakeLib) -> None:
    """Freeing a context that committed waits for an RCU grace period: the worker answers
    first, and its freeing thread frees the context after."""
    nft = nft_worker.Libnftables()
    request = {"commands": "list tables", "json": True}
    answer = nft_worker._execute(FakeLibc(), nft, 0, request)  # type: ignore[arg-type]
    assert answer == {"rc": 0, "output": "out", "error": ""}
    assert lib.ran == [b"list tables"] and lib.flags == {1: nft_worker._OUTPUT_JSON}
    assert lib.freed == []  # still waiting to be freed while the answer is out
    lib.release.set()
    nft.free_later(0)  # and in order: once this one is freed, so was the first
    assert lib.two_freed.wait(10)
    assert lib.freed == [(1, "nft-free"), (0, "nft-free")]


def test_past_a_bound_of_waiting_contexts_one_is_freed_at_once(lib: FakeLib) -> None:
    nft = nft_worker.Libnftables()
    nft.free_later(100)
    assert lib.freeing.wait(10)  # the freeing thread is busy with it
    for context in range(101, 101 + nft_worker._MAX_PENDING):
        nft.free_later(context)
    nft.free_later(999)
    assert lib.freed == [(999, threading.current_thread().name)]
    lib.release.set()


def test_a_missing_library_is_the_answer_to_every_request() -> None:
    answer = nft_worker._execute(
        FakeLibc(),  # type: ignore[arg-type]
        OSError("libnftables.so.1: cannot open shared object file"),
        0,
        {"commands": "list tables"},
    )
    assert answer["rc"] == -1 and "loading libnftables" in answer["error"]
