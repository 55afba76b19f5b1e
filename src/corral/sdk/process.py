"""Processes in a sandbox: following their event streams and collecting their output.

A process's output lives in the in-sandbox agent, numbered by `seq`. Following a process is
therefore resumable: when a stream breaks before the `exit` event, `follow_events` reconnects
with `?after=<last seq seen>` and nothing is lost or repeated. The reconnect budget counts
consecutive failures without progress, so a long command survives several daemon restarts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio

from corral.sdk._content import UploadData, iter_chunks
from corral.sdk._exec_wire import EventCallback, OutputCallback, OutputCollector
from corral.sdk._http import HTTPSession
from corral.sdk.errors import ConnectionFailed, CorralError, SandboxUnavailable
from corral.sdk.models import ExecResult, ProcessEvent, ProcessInfo

if TYPE_CHECKING:
    from corral.sdk.sandbox import AsyncSandbox

__all__ = [
    "RECONNECT_ATTEMPTS",
    "AsyncProcess",
    "EventCallback",
    "OutputCallback",
    "follow_events",
    "stream_exec",
]


RECONNECT_ATTEMPTS = 5
_BACKOFF_SECONDS = (0.1, 0.3, 0.6, 1.0, 2.0)
STDIN_CHUNK_SIZE = 64 * 1024


async def follow_events(
    session: HTTPSession, sandbox_path: str, pid: int, after: int = -1, follow: bool = True
) -> AsyncIterator[ProcessEvent]:
    """Events of process `pid` after `seq`=`after`, until `exit` (or, without `follow`, until
    the daemon has no more). Reconnects when the stream breaks."""
    failures = 0
    while True:
        progressed = False
        try:
            async with session.stream(
                "GET",
                f"{sandbox_path}/processes/{pid}/events",
                params={"after": after, "follow": "true" if follow else "false"},
            ) as response:
                async for event in session.iter_events(response):
                    if event.seq <= after:
                        continue
                    after = event.seq
                    progressed = True
                    yield event
                    if event.type == "exit":
                        return
            if not follow:
                return
            broken: CorralError = ConnectionFailed(
                f"the event stream of process {pid} ended before its exit", url=session.url
            )
        except (ConnectionFailed, SandboxUnavailable) as exc:
            broken = exc
        failures = 1 if progressed else failures + 1
        if failures > RECONNECT_ATTEMPTS:
            raise broken
        await anyio.sleep(_BACKOFF_SECONDS[min(failures, len(_BACKOFF_SECONDS)) - 1])


async def stream_exec(
    session: HTTPSession, sandbox_path: str, body: dict[str, Any]
) -> AsyncIterator[ProcessEvent]:
    """Start a foreground command and yield its events, resuming by pid if the stream breaks."""
    pid: int | None = None
    last_seq = -1
    exited = False
    try:
        # The session hands the exit event out once the stream has ended (it follows the exit
        # at once): a response closed early cannot go back to the pool, and every exec would
        # reconnect.
        async for event in session.exec_events(f"{sandbox_path}/exec", body):
            if exited:
                continue
            if event.type == "start":
                pid = event.pid
            last_seq = max(last_seq, event.seq)
            yield event
            exited = event.type == "exit"
    except ConnectionFailed:
        if pid is None:
            raise
    if exited:
        return
    if pid is None:
        raise ConnectionFailed("the exec stream ended before the process started", url=session.url)
    async for event in follow_events(session, sandbox_path, pid, after=last_seq):
        yield event


class AsyncProcess:
    """A handle on one process in a sandbox (it may have finished). Cheap: holds only the pid."""

    def __init__(self, sandbox: AsyncSandbox, pid: int) -> None:
        self.sandbox = sandbox
        self.pid = pid

    def __repr__(self) -> str:
        return f"<AsyncProcess {self.pid} in {self.sandbox.id}>"

    @property
    def _path(self) -> str:
        return f"{self.sandbox.path}/processes/{self.pid}"

    async def info(self) -> ProcessInfo:
        return ProcessInfo.from_wire(await self.sandbox.session.json("GET", self._path))

    def events(self, after: int = -1, follow: bool = True) -> AsyncIterator[ProcessEvent]:
        """The process's events after `seq`=`after` (from the start by default)."""
        return follow_events(self.sandbox.session, self.sandbox.path, self.pid, after, follow)

    async def wait(
        self,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        on_event: EventCallback | None = None,
    ) -> ExecResult:
        """Follow the process to its exit and return all its output."""
        collector = OutputCollector(on_stdout, on_stderr, on_event)
        events = self.events()
        try:
            async for event in events:
                await collector.feed(event)
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        return collector.result()

    async def send_stdin(self, data: UploadData) -> None:
        """Write to the process's stdin (it must have been started with `stdin=True`)."""
        async for chunk in iter_chunks(data, STDIN_CHUNK_SIZE):
            await self.sandbox.session.request("POST", f"{self._path}/stdin", content=chunk)

    async def close_stdin(self) -> None:
        await self.sandbox.session.request("POST", f"{self._path}/close-stdin")

    async def signal(self, signal: str | int = "SIGTERM") -> None:
        await self.sandbox.session.request(
            "POST", f"{self._path}/signal", json_body={"signal": signal}
        )

    async def kill(self) -> None:
        await self.signal("SIGKILL")
