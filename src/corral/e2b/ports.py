"""E2B clients reaching a sandbox's other ports through the E2B front (not envd's 49983).

The E2B SDKs address a port with ``E2b-Sandbox-Id`` / ``E2b-Sandbox-Port`` headers when
``E2B_SANDBOX_URL`` is set (the code interpreter's port 49999 so); the dispatcher (``mount``)
sends such requests here after checking the sandbox's envd access token (``X-Access-Token``) or
its traffic access token (``E2B-Traffic-Access-Token``). The request goes as HTTP to the port at
the sandbox's address (``PortService.resolve_inbound``: a parked sandbox with auto-wake wakes),
its body and the answer streamed both ways; when the client goes away, so does the connection
to the port (the code interpreter then interrupts the code it runs). The request counts as
activity while open (an idle sandbox is not frozen under it). Host names ``PORT-ID.<domain>``
of ports are the daemon's inbound proxy's (corral's open ports, ``corral port open``), before
any ASGI app.

The sandbox's credentials (``X-Access-Token``, ``E2B-Traffic-Access-Token``), a corral API key
(``X-API-Key``), the routing headers and hop-by-hop headers are not passed on; everything else
is (``Authorization`` too: it is the app's). The agent's own port answers nothing without the
agent's key, which no client has.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import httpx
from starlette.types import Receive, Scope, Send

from corral.e2b.errors import gone_message
from corral.service.errors import CorralError
from corral.service.ports import PortService

__all__ = ["PortForwarder"]

DROPPED_HEADERS = {
    b"host",
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
    b"te",
    b"trailer",
    b"x-access-token",
    b"e2b-traffic-access-token",
    b"e2b-sandbox-id",
    b"e2b-sandbox-port",
    b"x-api-key",  # a corral API key never reaches code in a sandbox
}
ANSWER_DROPPED = {"connection", "keep-alive", "transfer-encoding", "content-length"}
TIMEOUT = httpx.Timeout(connect=10.0, read=None, write=60.0, pool=30.0)
# A connection per request: a server in a sandbox may close an idle kept-alive connection at any
# time (a restarted kernel, its own timeout), and a request sent on it then fails with nothing
# to retry it (its body was streamed). Connecting over the slot's veth costs well under 1 ms.
LIMITS = httpx.Limits(max_keepalive_connections=0)
STATUS = {"not_found": 502, "conflict": 502, "sandbox_unavailable": 502}


async def answer(send: Send, status: int, message: str) -> None:
    body = json.dumps({"code": status, "message": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


class PortForwarder:
    """Forwards requests to sandbox ports; holds one HTTP client for all of them."""

    def __init__(self, ports: PortService) -> None:
        self._ports = ports
        self._http: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=TIMEOUT, limits=LIMITS, follow_redirects=False)
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    async def __call__(
        self, sandbox_id: str, port: int, scope: Scope, receive: Receive, send: Send
    ) -> None:
        try:
            target = await self._ports.resolve_inbound(sandbox_id, port)
        except CorralError as exc:
            status = STATUS.get(exc.code, 400)
            message = gone_message(sandbox_id, exc.message) if status == 502 else exc.message
            await answer(send, status, message)
            return
        query = scope.get("query_string", b"").decode("latin-1")
        url = f"http://{target.address}:{target.port}{scope['path']}" + (
            f"?{query}" if query else ""
        )
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in DROPPED_HEADERS]
        client = self._client()
        names = {k.lower() for k, _ in scope["headers"]}
        has_body = b"content-length" in names or b"transfer-encoding" in names
        # Without a body, receive() is left to the disconnect watch alone.
        content = _body(receive) if has_body else None
        request = client.build_request(scope["method"], url, headers=headers, content=content)
        with self._ports.activity(sandbox_id):  # not frozen while the request is open
            try:
                upstream = await client.send(request, stream=True)
            except httpx.HTTPError as exc:
                why = str(exc) or type(exc).__name__
                await answer(
                    send, 502, f"port {port} of sandbox {sandbox_id} did not answer: {why}"
                )
                return
            try:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(_cancel_on_disconnect, receive, tasks.cancel_scope)
                    await _relay(upstream, send)
                    tasks.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    await upstream.aclose()


async def _relay(upstream: httpx.Response, send: Send) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": upstream.status_code,
            "headers": [
                (k.encode("latin-1"), v.encode("latin-1"))
                for k, v in upstream.headers.multi_items()
                if k.lower() not in ANSWER_DROPPED
            ],
        }
    )
    try:
        async for chunk in upstream.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except httpx.HTTPError:
        pass  # the port closed mid-answer: the answer ends there
    await send({"type": "http.response.body", "body": b""})


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    """When the client goes away, stop relaying and close the upstream connection, so the
    server in the sandbox sees it go too (the code interpreter then interrupts the code)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body"):
            return
