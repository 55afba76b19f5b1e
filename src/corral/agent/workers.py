"""The agent's worker threads besides the reaper: the pipe readers (``PumpPool``, threads kept
for reuse that copy a child's output pipes into its event log) and the deadline killer
(``Deadlines``, one thread that kills the process groups whose timeout ran out).

Locking: ``PumpPool.lock`` guards its job queue and idle count; ``Deadlines.cond`` its heap.
Neither is held while a process's own ``cond`` is taken (``Process.append_output``,
``Process.on_timeout``), so they order after ``Agent.lock`` and ``Process.cond`` never matter.
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import time

from .process import Process

TYPE_CHECKING = False
if TYPE_CHECKING:
    import weakref
    from typing import Any, BinaryIO

PIPE_READ = 64 * 1024  # a Linux pipe holds 64 KiB, a bigger read gains nothing


class PumpPool:
    """Threads that read child pipes into event logs, kept for reuse.

    ``idle`` (under ``lock``) counts workers that wait for a job or are about to; ``submit`` takes
    one of them or starts a new worker before queueing, so every queued job has a worker. Up to
    ``keep_idle`` workers stay after their pipe closes; the others end. None is started ahead:
    a thread starts in well under a millisecond, and an idle sandbox should hold few.
    """

    def __init__(self, keep_idle: int = 16) -> None:
        self.jobs: collections.deque[tuple[Process, Any, bytes]] = collections.deque()
        self.lock = threading.Lock()
        self.ready = threading.Condition(self.lock)  # a job was queued
        self.idle = 0
        self.keep_idle = keep_idle

    def submit(self, proc: Process, pipe: Any, kind: bytes) -> None:
        """Have ``pipe`` read; raises RuntimeError (nothing queued) when no thread can start."""
        with self.lock:
            reuse = self.idle > 0
            if reuse:
                self.idle -= 1
        if not reuse:
            self._add_worker()
        with self.lock:
            self.jobs.append((proc, pipe, kind))
            self.ready.notify()

    def _add_worker(self) -> None:
        threading.Thread(target=self._work, name="pipe-reader", daemon=True).start()

    def _work(self) -> None:
        while True:
            with self.lock:
                while not self.jobs:
                    self.ready.wait()
                job = self.jobs.popleft()
            pump(*job)
            with self.lock:
                if self.idle >= self.keep_idle:
                    return
                self.idle += 1


class Deadlines:
    """One thread that SIGKILLs the process group of each process whose timeout ran out.

    The heap (under ``cond``) holds weak references, so a forgotten process is not kept alive by a
    distant deadline; deadlines are on the monotonic clock.
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.heap: list[tuple[float, int, weakref.ref[Process]]] = []
        self.order = itertools.count()
        self.started = False  # the thread starts with the first deadline

    def add(self, seconds: float, proc: Process) -> None:
        import heapq
        import weakref

        with self.cond:
            if not self.started:
                threading.Thread(target=self._run, name="deadlines", daemon=True).start()
                self.started = True
            entry = (time.monotonic() + seconds, next(self.order), weakref.ref(proc))
            heapq.heappush(self.heap, entry)
            if self.heap[0] is entry:
                self.cond.notify()

    def _run(self) -> None:
        import heapq

        while True:
            with self.cond:
                while not self.heap or self.heap[0][0] > time.monotonic():
                    self.cond.wait(self.heap[0][0] - time.monotonic() if self.heap else None)
                proc = heapq.heappop(self.heap)[2]()
            if proc is not None:
                proc.on_timeout()  # a no-op once it has finished


def pump(proc: Process, pipe: BinaryIO, kind: bytes) -> None:
    fd = pipe.fileno()
    try:
        while True:
            try:
                data = os.read(fd, PIPE_READ)
            except OSError:
                break
            if not data:
                break
            proc.append_output(kind, data)
    finally:
        pipe.close()
        proc.pipe_closed()
