"""Code execution in sandboxes: the daemon's side of the code interpreter.

Templates made ``--with code-interpreter`` run the interpreter server (``corral/interpreter``)
on port 49999 of every sandbox, labelled ``corral.interpreter.port``. This service checks a
sandbox has one, wakes it if it is parked with auto-wake, waits for the server while it starts
(a cold sandbox: the server, then its first kernel), and relays E2B's protocol: an execution's
NDJSON events pass through as dicts, each line bounded (``MAX_LINE``); contexts as JSON.

A caller that stops reading closes the connection to the server, which interrupts the code
(``interpreter/execution.py``): an abandoned execution never holds a context.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from corral.service.errors import (
    CorralError,
    InvalidRequest,
    NotFound,
    OperationFailed,
    SandboxUnavailable,
    StateConflict,
    TooLarge,
)
from corral.service.lifecycle.wake import WakeService
from corral.service.model import SandboxState
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.activity import Activity

__all__ = ["CodeService"]

INTERPRETER_LABEL = "corral.interpreter.port"
MAX_LINE = 32 * 1024 * 1024  # one event (a result's images); the server bounds its own
MAX_ANSWER = 1024 * 1024  # a context answer or an error body
# The sandbox is not trusted: what its port 49999 answers is read within these bounds, and
# anything malformed ends the call with an error instead of reaching the caller as it is.
WATCH = 2.0  # seconds without output after which an execution checks its sandbox still runs
START_WAIT = 120.0  # a cold sandbox: the server starts, then the default kernel
_POLL = 0.05
_UNARY = httpx.Timeout(120.0, connect=5.0)  # creating a context starts a kernel
_STREAM = httpx.Timeout(connect=5.0, read=None, write=60.0, pool=30.0)
Event = dict[str, Any]


class CodeService:
    """One keep-alive client to the sandboxes' interpreters; no state of its own."""

    def __init__(self, sandboxes: SandboxService, wakes: WakeService, activity: Activity) -> None:
        self._sandboxes = sandboxes
        self._wakes = wakes
        self._activity = activity
        self._http = httpx.AsyncClient(trust_env=False, timeout=_UNARY)

    async def aclose(self) -> None:
        await self._http.aclose()

    def interpreter_port(self, sandbox_id: str) -> int:
        """The port of the sandbox's interpreter; StateConflict if its template has none."""
        record = self._sandboxes.get(sandbox_id)
        try:
            template = self._sandboxes.templates.get(record.template)
        except NotFound:
            template = None
        port = template.labels.get(INTERPRETER_LABEL) if template else None
        if not port or not port.isdigit():
            raise StateConflict(
                f"sandbox {sandbox_id} has no code interpreter: its template "
                f"{record.template!r} was not built with one (make one with `corral template "
                "create NAME --with code-interpreter`)"
            )
        return int(port)

    async def _base_url(self, sandbox_id: str) -> str:
        port = self.interpreter_port(sandbox_id)
        client = await self._wakes.ready_agent(sandbox_id, "run code in")
        self._activity.touch(sandbox_id)
        return client.sandbox_url(port)

    async def _wait_ready(self, sandbox_id: str, base: str) -> None:
        """Until the server answers ``/health`` (it starts with the sandbox)."""
        deadline = time.monotonic() + START_WAIT
        while True:
            try:
                response = await self._http.get(base + "/health", timeout=5.0)
                if response.status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise await self._down(sandbox_id, "did not answer in time")
            await asyncio.sleep(_POLL)

    async def _down(self, sandbox_id: str, what: str) -> CorralError:
        err = await self._sandboxes.diagnose(sandbox_id, RuntimeError(what))
        if isinstance(err, SandboxUnavailable):
            return SandboxUnavailable(
                f"sandbox {sandbox_id}: its code interpreter {what} (the sandbox may be out of "
                "memory; it is restarted when it exits)"
            )
        return err

    @staticmethod
    def _refused(sandbox_id: str, status: int, body: bytes) -> CorralError:
        try:
            message = str(json.loads(body).get("error"))
        except (ValueError, AttributeError):
            message = body[:2000].decode(errors="replace")
        text = f"sandbox {sandbox_id}: {message}"
        if status == 404:
            return NotFound(text)
        if status in (400, 411):
            return InvalidRequest(text)
        if status == 409:
            return StateConflict(text)
        if status == 413:
            return TooLarge(text)
        return OperationFailed(text)

    async def _send(self, sandbox_id: str, base: str, request: httpx.Request) -> httpx.Response:
        """Send (streamed), waiting once for a server that is still starting."""
        for attempt in (1, 2):
            try:
                return await self._http.send(request, stream=True)
            except httpx.TransportError as exc:
                if attempt == 2:
                    raise await self._down(sandbox_id, f"did not answer ({exc})") from exc
                await self._wait_ready(sandbox_id, base)
        raise AssertionError("unreachable")

    async def _read(self, sandbox_id: str, response: httpx.Response) -> bytes:
        """The whole body, at most ``MAX_ANSWER`` bytes."""
        data = b""
        try:
            async for chunk in response.aiter_raw():
                data += chunk
                if len(data) > MAX_ANSWER:
                    raise OperationFailed(
                        f"sandbox {sandbox_id}: its code interpreter answered more than "
                        f"{MAX_ANSWER} bytes"
                    )
        except httpx.TransportError as exc:
            raise await self._down(sandbox_id, f"broke off its answer ({exc})") from exc
        finally:
            await response.aclose()
        return data

    async def _call(
        self, sandbox_id: str, method: str, path: str, body: dict[str, Any] | None = None
    ) -> Any:
        base = await self._base_url(sandbox_id)
        request = self._http.build_request(method, base + path, json=body)
        response = await self._send(sandbox_id, base, request)
        data = await self._read(sandbox_id, response)
        if response.status_code >= 400:
            raise self._refused(sandbox_id, response.status_code, data)
        if response.status_code == 204 or not data:
            return None
        try:
            return json.loads(data)
        except ValueError as exc:
            raise _garbled(sandbox_id) from exc

    # -- contexts --------------------------------------------------------------------------------
    async def create_context(
        self, sandbox_id: str, language: str | None, cwd: str | None
    ) -> dict[str, Any]:
        body = {k: v for k, v in (("language", language), ("cwd", cwd)) if v is not None}
        return _context(sandbox_id, await self._call(sandbox_id, "POST", "/contexts", body))

    async def list_contexts(self, sandbox_id: str) -> list[dict[str, Any]]:
        found = await self._call(sandbox_id, "GET", "/contexts")
        if not isinstance(found, list):
            raise _garbled(sandbox_id)
        return [_context(sandbox_id, item) for item in found]

    async def restart_context(self, sandbox_id: str, context_id: str) -> None:
        await self._call(sandbox_id, "POST", f"/contexts/{_segment(context_id)}/restart")

    async def remove_context(self, sandbox_id: str, context_id: str) -> None:
        await self._call(sandbox_id, "DELETE", f"/contexts/{_segment(context_id)}")

    # -- execution -------------------------------------------------------------------------------
    async def execute(self, sandbox_id: str, request: dict[str, Any]) -> AsyncIterator[Event]:
        """Start an execution; errors before its first event raise, then events stream."""
        base = await self._base_url(sandbox_id)
        sent = self._http.build_request("POST", base + "/execute", json=request, timeout=_STREAM)
        response = await self._send(sandbox_id, base, sent)
        if response.status_code != 200:
            body = await self._read(sandbox_id, response)
            raise self._refused(sandbox_id, response.status_code, body)
        return self._events(sandbox_id, response)

    def _running(self, sandbox_id: str) -> bool:
        try:
            return self._sandboxes.get(sandbox_id).state == SandboxState.RUNNING
        except NotFound:
            return False

    async def _chunks(self, sandbox_id: str, response: httpx.Response) -> AsyncIterator[bytes]:
        """The response's bytes as they come; ends early if the sandbox stops running.

        A killed or parked sandbox's network goes away without a reset, so a read would wait
        forever: a reader task fills a queue, and every ``WATCH`` seconds without data the
        sandbox's state is looked at."""
        queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(maxsize=16)

        async def read() -> None:
            try:
                async for chunk in response.aiter_raw():
                    await queue.put(chunk)
                await queue.put(None)
            except Exception as exc:
                await queue.put(exc)

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), WATCH)
                except TimeoutError:
                    if not self._running(sandbox_id):
                        return
                    continue
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader

    async def _events(self, sandbox_id: str, response: httpx.Response) -> AsyncIterator[Event]:
        buffer = b""
        ended = False
        chunks = self._chunks(sandbox_id, response)
        with self._activity.busy(sandbox_id):
            try:
                async for chunk in chunks:
                    buffer += chunk
                    while b"\n" in buffer:
                        line, _, buffer = buffer.partition(b"\n")
                        if not line.strip():
                            continue
                        try:
                            event = json.loads(line)
                        except ValueError:
                            event = None
                        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                            yield _stop(str(_garbled(sandbox_id)))
                            return
                        ended = ended or event["type"] == "end_of_execution"
                        yield event
                    if len(buffer) > MAX_LINE:
                        yield _stop(f"an event of over {MAX_LINE} bytes was cut off")
                        return
            except httpx.TransportError:
                pass
            finally:
                await chunks.aclose()  # type: ignore[attr-defined]
                await response.aclose()
            if not ended:
                err = await self._down(sandbox_id, "stopped answering during the execution")
                yield _stop(str(err))


def _garbled(sandbox_id: str) -> OperationFailed:
    return OperationFailed(
        f"sandbox {sandbox_id}: its code interpreter answered something that is not the protocol"
    )


def _context(sandbox_id: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(
        isinstance(value.get(k), str) for k in ("id", "language", "cwd")
    ):
        raise _garbled(sandbox_id)
    return {k: value[k][:4096] for k in ("id", "language", "cwd")}


def _stop(message: str) -> Event:
    return {"type": "error", "name": "ExecutionInterrupted", "value": message, "traceback": ""}


def _segment(value: str) -> str:
    if not value or not all(c.isalnum() or c in "-_" for c in value) or len(value) > 128:
        raise NotFound(f"no context {value!r}")
    return value
