"""One process started through the agent: its event log, its followers and its exit.

The event log: seq 0 is ``start`` (never stored); output chunks follow; ``exit`` comes last, once
both pipes reached EOF and the process was reaped. The log retains the last ``RETAIN_BYTES`` of
output. While a follower is attached and has not yet taken the oldest chunk, the pipe reader waits
for it (up to ``FOLLOWER_STALL``) instead of dropping, so a live stream is lossless and a fast
producer is slowed to the reader's pace; with nobody attached, old chunks are dropped and later
reported as ``truncated``. Output events leave the lock raw and are encoded by ``encode_events``.
"""

from __future__ import annotations

import _signal
import binascii
import collections
import itertools
import os
import sys
import threading
import time

from .jsonio import json_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .spawn import Child

RETAIN_BYTES = 16 * 1024 * 1024  # output kept per process
BATCH_BYTES = 1024 * 1024  # output a follower takes per write
FOLLOWER_STALL = 30.0  # how long a pipe reader waits for a lagging follower before dropping
DROP_INDEX_MAX = 4096  # (seq, bytes) points remembered for dropped chunks


class Process:
    """One process started through the agent, with its event log and followers.

    Invariants (all under ``cond``): retained output events have the contiguous seqs
    ``first_seq .. next_seq-1``; every seq below ``first_seq`` (except 0, ``start``) was dropped;
    ``exit_seq`` is set exactly once, when ``open_pipes`` is 0 and ``reaped`` is true, and it is
    the last seq ever given out. ``followers`` maps a follower id to ``[cursor, blocking]``: the
    last seq it took, and whether a pipe reader waits for it before dropping.
    """

    def __init__(self, child: Child, cmd: list[str], tag: Any) -> None:
        self.child = child  # its returncode is set by the reaper
        self.pid = child.pid
        self.cmd = cmd
        self.tag = tag
        self.cost = 0  # its share of the table's bound (argv and tag as JSON), set by the table
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.cond = threading.Condition()
        self.stdin_lock = threading.Lock()
        self.events: collections.deque[tuple[int, bytes, bytes]] = collections.deque()
        self.first_seq = 1
        self.next_seq = 1
        self.retained = 0
        self.dropped_total = 0
        self.drop_seqs: list[int] = []  # seqs of dropped chunks (thinned past DROP_INDEX_MAX)
        self.drop_totals: list[int] = []  # dropped_total right after that chunk was dropped
        self.followers: dict[int, list[Any]] = {}
        self.readers_waiting = 0
        self.open_pipes = 2
        self.reaped = False
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.timed_out = False
        self.exit_seq: int | None = None
        self.restart_spec: dict[str, object] | None = None  # supervised: started again on exit
        self.restart_delay = 0.25  # the last delay before a restart (processes.py doubles it)
        self.stopped = False  # a signal came through the API: not restarted
        self.winsize: tuple[int, int] | None = None  # (rows, cols) of a PTY process's terminal

    # -- producers ---------------------------------------------------------------------------

    def append_output(self, kind: bytes, data: bytes) -> None:
        """Called by a pipe reader; may wait for a lagging follower (backpressure)."""
        with self.cond:
            deadline: float | None = None
            while self.events and self.retained + len(data) > RETAIN_BYTES:
                oldest = self.events[0][0]
                behind = [f for f in self.followers.values() if f[1] and f[0] < oldest]
                if behind:
                    now = time.monotonic()
                    if deadline is None:
                        deadline = now + FOLLOWER_STALL
                    if now < deadline:
                        self.readers_waiting += 1
                        self.cond.wait(deadline - now)
                        self.readers_waiting -= 1
                        continue
                    for follower in behind:
                        follower[1] = False  # it stalled too long: stop waiting for it
                self._drop_oldest()
            self.events.append((self.next_seq, kind, data))
            self.next_seq += 1
            self.retained += len(data)
            self.cond.notify_all()

    def add_note(self, kind: bytes, data: bytes) -> None:
        """Append a line of the agent's own (the OOM killer's) to the output, never waiting
        for followers; nothing once the process's output has ended."""
        with self.cond:
            if self.exit_seq is not None:
                return
            while self.events and self.retained + len(data) > RETAIN_BYTES:
                self._drop_oldest()
            self.events.append((self.next_seq, kind, data))
            self.next_seq += 1
            self.retained += len(data)
            self.cond.notify_all()

    def _drop_oldest(self) -> None:
        seq, _, data = self.events.popleft()
        self.retained -= len(data)
        self.dropped_total += len(data)
        self.first_seq = seq + 1
        self.drop_seqs.append(seq)
        self.drop_totals.append(self.dropped_total)
        if len(self.drop_seqs) >= DROP_INDEX_MAX:  # thin out, keeping the newest point
            self.drop_seqs = self.drop_seqs[1::2]
            self.drop_totals = self.drop_totals[1::2]

    def pipe_closed(self) -> None:
        with self.cond:
            self.open_pipes -= 1
            self._finish_if_done()

    def on_reaped(self, status: int) -> None:
        with self.cond:
            self.reaped = True
            self.ended_at = time.time()
            if os.WIFSIGNALED(status):
                self.signal = os.WTERMSIG(status)
            else:
                self.exit_code = os.WEXITSTATUS(status)
            self.child.set_returncode(os.waitstatus_to_exitcode(status))
            self._finish_if_done()
        self._close_stdin_if_idle()

    def _finish_if_done(self) -> None:
        if self.exit_seq is None and self.reaped and self.open_pipes == 0:
            self.exit_seq = self.next_seq
            self.next_seq += 1
            self.cond.notify_all()

    def _close_stdin_if_idle(self) -> None:
        # A writer blocked in write() holds stdin_lock; it sees EPIPE and the pipe is closed on
        # forget instead.
        if self.stdin_lock.acquire(blocking=False):
            try:
                if self.child.stdin is not None:
                    self.child.stdin.close()
            finally:
                self.stdin_lock.release()

    # -- control -----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.exit_seq is None

    def forgettable(self) -> bool:
        """Finished and followed by nobody: the table may drop it to make room."""
        with self.cond:
            return self.exit_seq is not None and not self.followers

    def kill_group(self, signum: int, *, timed_out: bool = False) -> bool:
        """Signal the process group; False if the process has already finished."""
        with self.cond:
            # The group id stays ours while anything in the group (which holds our pipes) lives.
            if self.exit_seq is not None:
                return False
            if timed_out:
                self.timed_out = True
            try:  # noqa: SIM105 (contextlib is not imported by the agent)
                os.killpg(self.pid, signum)
            except ProcessLookupError:
                pass
            return True

    def on_timeout(self) -> None:
        self.kill_group(_signal.SIGKILL, timed_out=True)

    # -- followers ---------------------------------------------------------------------------

    def attach(self, after: int) -> int:
        with self.cond:
            fid = next(_follower_ids)
            self.followers[fid] = [after, True]
            return fid

    def detach(self, fid: int) -> None:
        with self.cond:
            self.followers.pop(fid, None)
            if self.readers_waiting:
                self.cond.notify_all()

    def snapshot_end(self) -> int:
        with self.cond:
            return self.exit_seq if self.exit_seq is not None else self.next_seq - 1

    def next_batch(
        self, fid: int, cursor: int, end: int | None
    ) -> tuple[list[bytes | tuple[int, bytes, bytes]], int, bool]:
        """Take the events after ``cursor`` (up to ``end``, or waiting for more when None).

        Returns (events, new cursor, done). Output events are returned raw, to be encoded outside
        the lock; the others are already encoded lines.
        """
        with self.cond:
            while True:
                batch, new_cursor = self._take(cursor, end)
                last = self.exit_seq if end is None else end
                done = last is not None and new_cursor >= last
                if batch or done or end is not None:
                    break
                self.cond.wait()
            follower = self.followers.get(fid)
            if follower is not None:
                follower[0] = new_cursor
            if self.readers_waiting:
                self.cond.notify_all()
            return batch, new_cursor, done

    def _take(self, cursor: int, end: int | None) -> tuple[list[Any], int]:
        batch: list[Any] = []
        limit = end if end is not None else sys.maxsize
        if cursor < 0 <= limit:
            batch.append(json_line({"seq": 0, "type": "start", "pid": self.pid}))
            cursor = 0
        if cursor < self.first_seq - 1 and cursor < limit:
            last_dropped = self.first_seq - 1
            batch.append(
                json_line(
                    {
                        "seq": last_dropped,
                        "type": "truncated",
                        "dropped_bytes": self._dropped_after(cursor),
                    }
                )
            )
            cursor = last_dropped
        size = 0
        start = cursor + 1 - self.first_seq
        for event in itertools.islice(self.events, start, None):
            if event[0] > limit or size >= BATCH_BYTES:
                break
            batch.append(event)
            size += len(event[2])
            cursor = event[0]
        if self.exit_seq is not None and cursor == self.exit_seq - 1 and self.exit_seq <= limit:
            batch.append(
                json_line(
                    {
                        "seq": self.exit_seq,
                        "type": "exit",
                        "exit_code": self.exit_code,
                        "signal": self.signal,
                        "timed_out": self.timed_out,
                    }
                )
            )
            cursor = self.exit_seq
        return batch, cursor

    def _dropped_after(self, cursor: int) -> int:
        # Bytes of dropped chunks with seq > cursor; exact until the index was thinned, an
        # over-estimate after.
        import bisect

        i = bisect.bisect_right(self.drop_seqs, cursor) - 1
        return self.dropped_total - (self.drop_totals[i] if i >= 0 else 0)

    def describe(self) -> dict[str, Any]:
        with self.cond:
            described: dict[str, Any] = {
                "pid": self.pid,
                "cmd": self.cmd,
                "tag": self.tag,
                "running": self.exit_seq is None,
                "exit_code": self.exit_code,
                "signal": self.signal,
                "started_at": self.started_at,
                "ended_at": self.ended_at,
            }
            if self.winsize is not None:
                described["pty"] = True
                described["rows"], described["cols"] = self.winsize
            return described


_follower_ids = itertools.count(1)


def encode_events(batch: list[Any]) -> bytes:
    parts = []
    for event in batch:
        if isinstance(event, bytes):
            parts.append(event)
        else:
            seq, kind, data = event
            parts.append(
                b'{"seq":%d,"type":"%b","data":"%b"}\n'
                % (seq, kind, binascii.b2a_base64(data, newline=False))
            )
    return b"".join(parts)
