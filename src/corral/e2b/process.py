"""envd's Process service (Connect RPC) over corral's ProcessService and the agent.

E2B's ``Start`` stream is corral's streamed exec; ``Connect`` reads the agent's buffered output
of a pid; stdin, close-stdin and signals are the agent's calls. A ``Start`` with ``pty`` opens
one of the agent's terminals: its output (the agent's ``stdout`` events of that process) goes out
as envd's ``pty`` data, ``pty`` input is written to the terminal and ``Update`` resizes it.
``Connect-Timeout-Ms`` of a ``Start`` becomes the process's timeout.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Literal

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from protobuf import Oneof

from corral.e2b.context import sandbox_of, user_of
from corral.e2b.envd.process import process_pb as pb
from corral.e2b.envd.process.process_connect import Process
from corral.e2b.errors import connect_error_of, gone_message
from corral.service.errors import CorralError
from corral.service.model import ExecSpec, PtySize
from corral.service.processes import ProcessService

KEEPALIVE_HEADER = "keepalive-ping-interval"
KEEPALIVE_BOUNDS = (1.0, 300.0)
SIGNALS = {pb.Signal.SIGTERM: "SIGTERM", pb.Signal.SIGKILL: "SIGKILL"}


def _event(kind: Literal["start", "data", "end", "keepalive"], value: Any) -> pb.ProcessEvent:
    chosen: Any = Oneof(kind, value)
    return pb.ProcessEvent(event=chosen)


def _data_event(kind: str, data: bytes) -> pb.ProcessEvent:
    output: Any = Oneof(kind, data)
    return _event("data", pb.ProcessEvent.DataEvent(output=output))


def _end_event(event: dict[str, Any]) -> pb.ProcessEvent:
    signal = event.get("signal")
    code = event.get("exit_code")
    if event.get("timed_out"):
        status, error = "signal: killed", "the command timed out"
    elif signal:
        status, error = f"signal: {signal}", None
    else:
        status, error = f"exit status {code}", None
    end = pb.ProcessEvent.EndEvent(
        exit_code=code if code is not None else -1, exited=signal is None, status=status
    )
    if error:
        end.error = error
    return _event("end", end)


def to_process_events(event: dict[str, Any], pty: bool = False) -> list[pb.ProcessEvent]:
    kind = event.get("type")
    if kind == "start":
        return [_event("start", pb.ProcessEvent.StartEvent(pid=event["pid"]))]
    if kind in ("stdout", "stderr"):
        # A terminal's output comes from the agent as the process's stdout.
        return [_data_event("pty" if pty else kind, base64.b64decode(event.get("data", "")))]
    if kind == "exit":
        return [_end_event(event)]
    return []  # "truncated": the agent dropped old output; envd has no such event


def keepalive_interval(headers: Any) -> float | None:
    raw = headers.get(KEEPALIVE_HEADER)
    try:
        value = float(raw) if raw else None
    except ValueError:
        return None
    return None if value is None else min(max(value, KEEPALIVE_BOUNDS[0]), KEEPALIVE_BOUNDS[1])


KEEPALIVE = _event("keepalive", pb.ProcessEvent.KeepAlive())


async def with_keepalive(
    sandbox_id: str,
    events: AsyncIterator[dict[str, Any]],
    interval: float | None,
    pty: bool = False,
) -> AsyncIterator[pb.ProcessEvent]:
    """The process events as envd's, with a keepalive after every ``interval`` s of silence.

    A stream that ends before the process's exit event broke (the sandbox was parked or killed):
    that ends the RPC with UNAVAILABLE "... was not found", not silently."""
    pending: asyncio.Future[dict[str, Any]] | None = None
    ended = False
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield KEEPALIVE
                continue
            try:
                event = pending.result()
            except StopAsyncIteration:
                if ended:
                    return
                raise ConnectError(
                    Code.UNAVAILABLE,
                    gone_message(
                        sandbox_id,
                        "the stream of its process broke (parked or killed); after a wake, "
                        "commands.connect(pid) reads on",
                    ),
                ) from None
            finally:
                pending = None
            # Read on after the exit event: the service then lets the agent forget the process.
            ended = ended or event.get("type") == "exit"
            for out in to_process_events(event, pty):
                yield out
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


class ProcessHandler(Process):
    """Implements ``process.Process`` for the sandbox the dispatcher put in the request."""

    def __init__(self, processes: ProcessService) -> None:
        self._processes = processes

    async def _pid(self, sandbox_id: str, selector: pb.ProcessSelector | None) -> int:
        chosen = selector.selector if selector is not None else None
        if chosen is None:
            raise ConnectError(Code.INVALID_ARGUMENT, "a process selector (pid or tag) is required")
        if chosen.field == "pid":
            return int(chosen.value)
        for info in await self._listed(sandbox_id):
            if info.get("tag") == chosen.value and info.get("running"):
                return int(info["pid"])
        raise ConnectError(Code.NOT_FOUND, f"no running process with tag {chosen.value!r}")

    async def _is_pty(self, sandbox_id: str, pid: int) -> bool:
        return any(
            int(info["pid"]) == pid and bool(info.get("pty"))
            for info in await self._listed(sandbox_id)
        )

    async def _listed(self, sandbox_id: str) -> list[dict[str, Any]]:
        return await self._processes.list_processes(sandbox_id)

    async def _call(self, sandbox_id: str, call: Awaitable[None]) -> None:
        """Await ``call`` on the sandbox's processes, its refusals as Connect's."""
        try:
            await call
        except CorralError as exc:
            raise connect_error_of(sandbox_id, exc) from exc

    async def list(self, request: pb.ListRequest, ctx: RequestContext[Any, Any]) -> pb.ListResponse:
        sandbox_id = sandbox_of(ctx.request_headers)
        try:
            items = await self._listed(sandbox_id)
        except CorralError as exc:
            raise connect_error_of(sandbox_id, exc) from exc
        out = []
        for info in items:
            if not info.get("running"):
                continue
            cmd = list(info.get("cmd") or [""])
            process = pb.ProcessInfo(
                config=pb.ProcessConfig(cmd=cmd[0], args=cmd[1:]), pid=int(info["pid"])
            )
            if info.get("tag") is not None:
                process.tag = info["tag"]
            out.append(process)
        return pb.ListResponse(processes=out)

    async def start(
        self, request: pb.StartRequest, ctx: RequestContext[Any, Any]
    ) -> AsyncIterator[pb.StartResponse]:
        headers = ctx.request_headers
        sandbox_id = sandbox_of(headers)
        config = request.process or pb.ProcessConfig()
        if not config.cmd:
            raise ConnectError(Code.INVALID_ARGUMENT, "process.cmd is required")
        timeout_ms = ctx.timeout_ms
        spec = ExecSpec(
            cmd=[config.cmd, *config.args],
            env=dict(config.envs),
            cwd=config.cwd or None,
            user=user_of(headers),
            tag=request.tag,
            timeout=timeout_ms / 1000 if timeout_ms else None,
        )
        pty = request.pty is not None
        try:
            if pty:
                events = await self._open_terminal(sandbox_id, spec, request.pty)
            else:
                stdin = True if request.stdin is None else bool(request.stdin)
                events = await self._processes.exec_stream(
                    sandbox_id, dataclasses.replace(spec, stdin=stdin)
                )
        except CorralError as exc:
            raise connect_error_of(sandbox_id, exc) from exc
        async for out in with_keepalive(sandbox_id, events, keepalive_interval(headers), pty):
            yield pb.StartResponse(event=out)

    async def _open_terminal(
        self, sandbox_id: str, spec: ExecSpec, pty: pb.PTY | None
    ) -> AsyncIterator[dict[str, Any]]:
        size = pty.size if pty is not None else None
        if size is None or not size.rows or not size.cols:
            raise ConnectError(Code.INVALID_ARGUMENT, "pty.size needs rows and cols above 0")
        spec = dataclasses.replace(spec, pty=PtySize(size.rows, size.cols))
        pid = await self._processes.start_pty(sandbox_id, spec)
        return await self._processes.events(sandbox_id, pid, -1, True)

    async def connect(
        self, request: pb.ConnectRequest, ctx: RequestContext[Any, Any]
    ) -> AsyncIterator[pb.ConnectResponse]:
        headers = ctx.request_headers
        sandbox_id = sandbox_of(headers)
        try:
            pid = await self._pid(sandbox_id, request.process)
            pty = await self._is_pty(sandbox_id, pid)
            events = await self._processes.events(sandbox_id, pid, -1, True)
        except CorralError as exc:
            raise connect_error_of(sandbox_id, exc) from exc
        async for out in with_keepalive(sandbox_id, events, keepalive_interval(headers), pty):
            yield pb.ConnectResponse(event=out)

    async def update(
        self, request: pb.UpdateRequest, ctx: RequestContext[Any, Any]
    ) -> pb.UpdateResponse:
        """Resize a terminal (the only update envd has)."""
        sandbox_id = sandbox_of(ctx.request_headers)
        size = request.pty.size if request.pty is not None else None
        if size is None:
            return pb.UpdateResponse()
        try:
            pid = await self._pid(sandbox_id, request.process)
        except CorralError as exc:
            raise connect_error_of(sandbox_id, exc) from exc
        await self._call(sandbox_id, self._processes.resize(sandbox_id, pid, size.rows, size.cols))
        return pb.UpdateResponse()

    async def _send(self, sandbox_id: str, pid: int, given: pb.ProcessInput | None) -> None:
        chosen = given.input if given is not None else None
        if chosen is None:
            return
        # Terminal input and stdin both go to the process's input (its terminal for a PTY).
        await self._call(
            sandbox_id, self._processes.send_stdin(sandbox_id, pid, bytes(chosen.value))
        )

    async def send_input(
        self, request: pb.SendInputRequest, ctx: RequestContext[Any, Any]
    ) -> pb.SendInputResponse:
        sandbox_id = sandbox_of(ctx.request_headers)
        try:
            pid = await self._pid(sandbox_id, request.process)
        except CorralError as exc:
            raise connect_error_of(sandbox_id, exc) from exc
        await self._send(sandbox_id, pid, request.input)
        return pb.SendInputResponse()

    async def stream_input(
        self, request: AsyncIterator[pb.StreamInputRequest], ctx: RequestContext[Any, Any]
    ) -> pb.StreamInputResponse:
        sandbox_id = sandbox_of(ctx.request_headers)
        pid: int | None = None
        async for message in request:
            event = message.event
            if event is None or event.field == "keepalive":
                continue
            if event.field == "start":
                try:
                    pid = await self._pid(sandbox_id, event.value.process)
                except CorralError as exc:
                    raise connect_error_of(sandbox_id, exc) from exc
            elif pid is None:
                raise ConnectError(Code.FAILED_PRECONDITION, "send a start event first")
            else:
                await self._send(sandbox_id, pid, event.value.input)
        return pb.StreamInputResponse()

    async def send_signal(
        self, request: pb.SendSignalRequest, ctx: RequestContext[Any, Any]
    ) -> pb.SendSignalResponse:
        sandbox_id = sandbox_of(ctx.request_headers)
        signal = SIGNALS.get(request.signal)
        if signal is None:
            raise ConnectError(Code.INVALID_ARGUMENT, "signal must be SIGTERM or SIGKILL")
        try:
            pid = await self._pid(sandbox_id, request.process)
        except CorralError as exc:
            raise connect_error_of(sandbox_id, exc) from exc
        await self._call(sandbox_id, self._processes.signal(sandbox_id, pid, signal))
        return pb.SendSignalResponse()

    async def close_stdin(
        self, request: pb.CloseStdinRequest, ctx: RequestContext[Any, Any]
    ) -> pb.CloseStdinResponse:
        sandbox_id = sandbox_of(ctx.request_headers)
        try:
            pid = await self._pid(sandbox_id, request.process)
        except CorralError as exc:
            raise connect_error_of(sandbox_id, exc) from exc
        await self._call(sandbox_id, self._processes.close_stdin(sandbox_id, pid))
        return pb.CloseStdinResponse()
