"""Processes in sandboxes: exec (streamed or in the background), output reconnect, stdin, signals.

The agent in the sandbox owns the processes and buffers their output; this service finds the
sandbox's agent, checks the sandbox may be used, and translates the agent's errors.

Invariant: a streamed exec with a ``timeout`` ends, for its caller, at most the timeout plus
``exec_timeout_grace_seconds`` after it started. The agent enforces the timeout; if it has not
sent the exit by then (a sandbox so overloaded that its agent gets no CPU, e.g. a fork bomb),
the daemon ends the stream itself with an ``exit`` event that has ``timed_out`` set, no exit
code and an ``error`` saying why, and asks the agent, in the background, to kill the process
group once it can.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from corral.runtime.agent_client import AgentClient, AgentError
from corral.service.errors import CorralError, InvalidRequest
from corral.service.lifecycle.wake import WakeService
from corral.service.model import ExecSpec
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.activity import Activity
from corral.service.sandboxes.agents import translate_agent_error

T = TypeVar("T")
log = logging.getLogger("corral.processes")

# How long the daemon keeps asking a starved agent to kill a process whose exec it ended.
LATE_KILL_WAIT_S = 300.0

Event = dict[str, Any]


class ProcessService:
    """Processes of running sandboxes, through their agents; a parked sandbox that asked for
    ``auto_wake`` is woken first, and every call counts as activity for idle auto-park."""

    def __init__(self, sandboxes: SandboxService, wakes: WakeService, activity: Activity) -> None:
        self._sandboxes = sandboxes
        self._wakes = wakes
        self._activity = activity
        self._late_kills: set[asyncio.Task[None]] = set()

    async def _error(self, sandbox_id: str, exc: AgentError) -> CorralError:
        if getattr(exc, "status", None) is None or exc.code == "unavailable":
            return await self._sandboxes.diagnose(sandbox_id, exc)
        return translate_agent_error(sandbox_id, exc)

    def _template_defaults(self, sandbox_id: str, spec: ExecSpec) -> dict[str, object]:
        """The agent's body for ``spec``, with the template's workdir and user unless it asks
        for others."""
        workdir, user = self._sandboxes.templates.exec_defaults(sandbox_id)
        if spec.cwd is None and workdir:
            spec = dataclasses.replace(spec, cwd=workdir)
        if spec.user is None and user:
            spec = dataclasses.replace(spec, user=user)
        return spec.to_wire()

    @staticmethod
    def _check(spec: ExecSpec) -> None:
        if (spec.cmd is None) == (spec.shell is None):
            raise InvalidRequest("give exactly one of 'cmd' (argv list) and 'shell' (a string)")

    async def exec_stream(self, sandbox_id: str, spec: ExecSpec) -> AsyncIterator[Event]:
        """Start a process and return its event stream; errors to start raise before streaming."""
        self._check(spec)
        body = self._template_defaults(sandbox_id, spec)
        client = await self._wakes.ready_agent(sandbox_id, "exec in")
        # Once the agent has sent the exit event it drops the process and its output (nothing
        # is left to reconnect to); a stream cut before that leaves it for the client's
        # reconnect by pid, and the agent's table forgets finished ones when it fills up.
        stream = client.stream_process(body, forget=True)
        try:
            first = await anext(stream)
        except AgentError as exc:
            await stream.aclose()
            raise await self._error(sandbox_id, exc) from exc

        loop = asyncio.get_running_loop()
        grace = self._sandboxes.settings.exec_timeout_grace_seconds
        deadline = loop.time() + spec.timeout + grace if spec.timeout else None

        async def events() -> AsyncIterator[Event]:
            with self._activity.busy(sandbox_id):
                yield first
                last = first
                try:
                    while True:
                        try:
                            async with asyncio.timeout_at(deadline):
                                event = await anext(stream)
                        except StopAsyncIteration:
                            return
                        except TimeoutError:
                            yield self._overdue(sandbox_id, client, last, spec.timeout, grace)
                            return
                        last = event
                        yield event
                except AgentError:
                    # The stream broke (sandbox killed or parked); the client reconnects by pid.
                    return
                finally:
                    await stream.aclose()

        return events()

    def _overdue(
        self, sandbox_id: str, client: AgentClient, last: Event, timeout: float | None, grace: float
    ) -> Event:
        """The exit event the daemon sends for a process its agent did not end in time, and
        the kill it asks of the agent in the background (the agent answers once it gets CPU)."""
        pid = last.get("pid") if last.get("type") == "start" else None
        pid = pid if isinstance(pid, int) else None
        message = (
            f"sandbox {sandbox_id}: the process did not end at its {timeout:g} s timeout and the"
            f" sandbox's agent did not answer for {grace:g} s more (the sandbox is overloaded,"
            " e.g. by a fork bomb); the daemon ended this exec and asked the agent to kill the"
            f" process, which may still be running (GET /v1/sandboxes/{sandbox_id}/processes"
            f" lists them; `corral kill {sandbox_id}` ends the sandbox)"
        )
        log.warning("%s", message)
        if pid is not None:
            task = asyncio.get_running_loop().create_task(self._kill_late(sandbox_id, client, pid))
            self._late_kills.add(task)
            task.add_done_callback(self._late_kills.discard)
        seq = last.get("seq")
        return {
            "seq": (seq if isinstance(seq, int) else 0) + 1,
            "type": "exit",
            "exit_code": None,
            "signal": None,
            "timed_out": True,
            "error": message,
        }

    async def _kill_late(self, sandbox_id: str, client: AgentClient, pid: int) -> None:
        with contextlib.suppress(AgentError, TimeoutError):
            async with asyncio.timeout(LATE_KILL_WAIT_S):
                await client.signal(pid, "KILL")
                log.info("sandbox %s: process %d killed after its timeout", sandbox_id, pid)

    async def start(self, sandbox_id: str, spec: ExecSpec) -> int:
        self._check(spec)
        body = self._template_defaults(sandbox_id, spec)
        client = await self._wakes.ready_agent(sandbox_id, "exec in")
        self._activity.touch(sandbox_id)
        try:
            return await client.start_process(body)
        except AgentError as exc:
            raise await self._error(sandbox_id, exc) from exc

    async def start_pty(self, sandbox_id: str, spec: ExecSpec) -> int:
        """Start a process on a new pseudo-terminal (``spec`` has ``pty: {rows, cols}``; no
        ``cmd`` means the login shell); it is then a process like the others, with a resize."""
        if spec.shell is not None or spec.pty is None:
            raise InvalidRequest(
                "a terminal takes 'cmd' (argv list, or none for the shell) and 'pty'"
            )
        body = self._template_defaults(sandbox_id, spec)
        client = await self._wakes.ready_agent(sandbox_id, "open a terminal in")
        self._activity.touch(sandbox_id)
        try:
            return await client.start_process(body)
        except AgentError as exc:
            raise await self._error(sandbox_id, exc) from exc

    async def events(
        self, sandbox_id: str, pid: int, after: int, follow: bool
    ) -> AsyncIterator[Event]:
        client = await self._wakes.ready_agent(sandbox_id, "read process output of")
        stream = client.events(pid, after=after, follow=follow)
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            first = None
        except AgentError as exc:
            await stream.aclose()
            raise await self._error(sandbox_id, exc) from exc

        async def events() -> AsyncIterator[Event]:
            if first is None:
                return
            yield first
            try:
                async for event in stream:
                    yield event
            except AgentError:
                return
            finally:
                await stream.aclose()

        return events()

    async def _on_agent(
        self, sandbox_id: str, action: str, call: Callable[[AgentClient], Awaitable[T]]
    ) -> T:
        """One non-streaming call on the sandbox's agent (woken first if it asked for
        ``auto_wake``), counted as activity, its errors translated."""
        client = await self._wakes.ready_agent(sandbox_id, action)
        self._activity.touch(sandbox_id)
        try:
            return await call(client)
        except AgentError as exc:
            raise await self._error(sandbox_id, exc) from exc

    async def list_processes(self, sandbox_id: str) -> list[dict[str, Any]]:
        return await self._on_agent(sandbox_id, "list processes of", lambda a: a.list_processes())

    async def get_process(
        self, sandbox_id: str, pid: int, *, action: str = "inspect processes of"
    ) -> dict[str, Any]:
        """One process as the agent lists it (``action`` names the call in a refusal)."""
        return await self._on_agent(sandbox_id, action, lambda a: a.get_process(pid))

    async def send_stdin(
        self, sandbox_id: str, pid: int, data: bytes, *, action: str = "send input in"
    ) -> None:
        await self._on_agent(sandbox_id, action, lambda a: a.send_stdin(pid, data))

    async def close_stdin(self, sandbox_id: str, pid: int) -> None:
        await self._on_agent(sandbox_id, "close input in", lambda a: a.close_stdin(pid))

    async def signal(self, sandbox_id: str, pid: int, sig: int | str) -> None:
        """Send ``sig`` (a number or a name such as ``"SIGTERM"``) to the process group."""
        await self._on_agent(sandbox_id, "signal processes in", lambda a: a.signal(pid, sig))

    async def resize(self, sandbox_id: str, pid: int, rows: int, cols: int) -> None:
        """Set the terminal size of a process started with a terminal."""
        await self._on_agent(
            sandbox_id, "resize a terminal in", lambda a: a.resize(pid, rows, cols)
        )
