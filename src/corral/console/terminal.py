"""A sandbox's terminal over a WebSocket: the console's xterm.js to a PTY process in the sandbox.

``/console/api/sandboxes/{id}/terminal?rows=R&cols=C[&pid=P]`` opens a new terminal (the login
shell) or, with ``pid``, reattaches to one that is still running (its buffered output replays
first, so a reloaded page shows the screen it had). Frames:

- to the daemon: binary = keystrokes (at most ``MAX_INPUT`` bytes a frame); text = JSON
  ``{"type": "resize", "rows", "cols"}``;
- from the daemon: binary = terminal output; text = JSON ``{"type": "ready", "pid"}`` first,
  ``{"type": "exit", "exit_code"}`` when the command ends, ``{"type": "error", "message"}``
  before a close for a failure.

Authentication: the console session cookie (or an ``Authorization: Bearer`` key, for programs).
A browser opens WebSockets across origins with the user's cookies (no CORS), so a handshake that
carries a cookie must come with the daemon's own ``Origin``, or it is refused before it is
accepted. A viewer key may not open a terminal.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from corral.errcodes import status_of
from corral.service.access import Permission, acting_as, authorize
from corral.service.auth import principal_of
from corral.service.console_sessions import COOKIE_NAME
from corral.service.errors import CorralError, InvalidRequest
from corral.service.model import ExecSpec, PtySize
from corral.service.processes import ProcessService
from corral.service.records import ApiKeyRecord
from corral.service.workspace import Workspace

router = APIRouter(prefix="/console/api")
log = logging.getLogger("corral.console")

MAX_INPUT = 64 * 1024
# Close codes (4000 + the HTTP status a page would know) for failures after the handshake.
CLOSE_FOR_STATUS = {401: 4401, 403: 4403, 404: 4404, 409: 4409}


def _origin_of(websocket: WebSocket) -> str:
    scheme = "https" if websocket.url.scheme == "wss" else "http"
    return f"{scheme}://{websocket.headers.get('host', '')}"


def _authenticate(websocket: WebSocket, ws: Workspace) -> ApiKeyRecord | None:
    """The key of the handshake, or None to refuse it before accepting (cross-origin, no key)."""
    header = websocket.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return ws.api_keys.verify(token.strip())
    session = ws.console_sessions.get(websocket.cookies.get(COOKIE_NAME))
    if session is None or websocket.headers.get("origin") != _origin_of(websocket):
        return None
    return ws.api_keys.verify(session.api_key)


def _size(value: str | None, default: int, limit: int) -> int:
    try:
        number = int(value) if value is not None else default
    except ValueError:
        return default
    return max(1, min(number, limit))


@router.websocket("/sandboxes/{sandbox_id}/terminal")
async def terminal(websocket: WebSocket, sandbox_id: str) -> None:
    ws: Workspace = websocket.app.state.workspace
    try:
        key = _authenticate(websocket, ws)
    except CorralError:
        key = None
    if key is None:
        await websocket.close(code=1008)  # before accept: the handshake is answered 403
        return
    await websocket.accept()
    try:
        # The terminal acts as its key: a role or scope without sandbox writes is refused,
        # and another member's sandbox is not found (service.access).
        principal = principal_of(key)
        acting_as(principal)
        authorize(Permission("sandboxes", "write"), principal)
        ws.rate_limits.take(key)
        pid = await _open(websocket, ws.processes, sandbox_id)
        await websocket.send_text(json.dumps({"type": "ready", "pid": pid}))
        await _bridge(websocket, ws.processes, sandbox_id, pid)
    except WebSocketDisconnect:
        return
    except CorralError as exc:
        with contextlib.suppress(Exception):
            await websocket.send_text(json.dumps({"type": "error", "message": exc.message}))
            await websocket.close(code=CLOSE_FOR_STATUS.get(status_of(exc.code), 1011))
        return
    except Exception:
        # A send to a page that went away fails with the server library's own error.
        log.debug("terminal of sandbox %s ended", sandbox_id, exc_info=True)
        with contextlib.suppress(Exception):
            await websocket.close(code=1011)
        return
    with contextlib.suppress(Exception):
        await websocket.close()


async def _open(websocket: WebSocket, processes: ProcessService, sandbox_id: str) -> int:
    query = websocket.query_params
    rows = _size(query.get("rows"), 24, 1000)
    cols = _size(query.get("cols"), 80, 1000)
    if query.get("pid"):
        try:
            pid = int(query["pid"])
        except ValueError:
            raise InvalidRequest(f"pid {query['pid']!r} is not a number") from None
        info = await processes.get_process(sandbox_id, pid, action="attach to a terminal in")
        if not info.get("pty"):
            raise InvalidRequest(f"process {pid} in sandbox {sandbox_id} is not a terminal")
        if info.get("exit_code") is not None or info.get("state") == "exited":
            raise CorralError(
                f"the terminal (process {pid}) in sandbox {sandbox_id} has ended", code="not_found"
            )
        await processes.resize(sandbox_id, pid, rows, cols)
        return pid
    return await processes.start_pty(sandbox_id, ExecSpec(env={}, pty=PtySize(rows, cols)))


async def _bridge(
    websocket: WebSocket, processes: ProcessService, sandbox_id: str, pid: int
) -> None:
    """Copy output to the socket and keystrokes to the terminal until either side ends."""

    async def output() -> None:
        events = await processes.events(sandbox_id, pid, -1, True)
        async for event in events:
            kind = event.get("type")
            if kind in ("stdout", "stderr") and event.get("data"):
                await websocket.send_bytes(base64.b64decode(event["data"]))
            elif kind == "exit":
                code = event.get("exit_code")
                if code is None and event.get("signal") is not None:
                    code = 128 + int(event["signal"])
                await websocket.send_text(json.dumps({"type": "exit", "exit_code": code}))
                return
        await websocket.send_text(
            json.dumps(
                {
                    "type": "error",
                    "message": f"the terminal's output stopped (sandbox {sandbox_id} "
                    "was parked, killed or restarted): reconnect to reattach",
                }
            )
        )

    async def keystrokes() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            if data:
                if len(data) > MAX_INPUT:
                    raise InvalidRequest(f"a terminal input frame is over {MAX_INPUT} bytes")
                await processes.send_stdin(sandbox_id, pid, data, action="type into a terminal in")
            elif message.get("text"):
                await _control(processes, sandbox_id, pid, message["text"])

    tasks = [asyncio.create_task(output()), asyncio.create_task(keystrokes())]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect):
                await task
    for task in done:
        error = task.exception()
        if isinstance(error, WebSocketDisconnect):
            return
        if error is not None:
            raise error


async def _control(processes: ProcessService, sandbox_id: str, pid: int, text: str) -> None:
    try:
        message = json.loads(text[:1024])
    except ValueError:
        raise InvalidRequest("a terminal control frame is not JSON") from None
    if isinstance(message, dict) and message.get("type") == "resize":
        rows = _size(str(message.get("rows")), 24, 1000)
        cols = _size(str(message.get("cols")), 80, 1000)
        await processes.resize(sandbox_id, pid, rows, cols)
