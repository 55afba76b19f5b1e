"""The daemon's own ``/mcp``: corral's MCP tools over streamable HTTP, with its API keys.

A request must carry an API key (``Authorization: Bearer KEY`` or ``X-API-Key``), checked before
MCP sees it: 401 otherwise. The tools then act through the SDK, as that key, against the
daemon's own listener, so a key's role limits the tools exactly as it limits the API.

Each (API key, MCP session) has its own ``SandboxPool``, so a session's calls without a
``sandbox_id`` share one default sandbox. Sandboxes made over HTTP get a TTL (``DEFAULT_TTL``
unless the call gives one) and are not killed when a session ends: an HTTP client may come
back, and the TTL bounds what a vanished one leaves. At most ``MAX_POOLS`` pools are held; the
least recently used one is closed (its client, never its sandboxes) to make room.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from corral.mcp.pool import SandboxPool
from corral.mcp.server import instructions
from corral.mcp.tools import register_tools
from corral.sdk import AsyncClient
from corral.service.audit import current_note
from corral.service.auth import ApiKeys, principal_of

__all__ = ["McpOverHttp", "install"]

PATH = "/mcp"
DEFAULT_TTL = 3600
MAX_POOLS = 256
SESSION_HEADER = "mcp-session-id"


def presented_key(headers: Any) -> str | None:
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return headers.get("x-api-key") or None


def own_url(listen: str) -> str:
    """The URL the daemon reaches itself by (a wildcard bind is reached on loopback)."""
    host, _, port = listen.rpartition(":")
    host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "": "127.0.0.1"}.get(host, host)
    return f"http://{host}:{port}"


class McpOverHttp:
    """The ``/mcp`` endpoint (an ASGI app) and the pools of its sessions."""

    def __init__(self, api_keys: ApiKeys, listen: str, template: str = "base") -> None:
        self.api_keys = api_keys
        self.url = own_url(listen)
        self.template = template
        self.pools: OrderedDict[str, SandboxPool] = OrderedDict()
        self._lock = anyio.Lock()
        self.server: MCPServer[Any] = MCPServer(
            "corral", instructions=instructions(template), log_level="WARNING"
        )
        register_tools(self.server, self.pool_of)
        # Builds the session manager; the API key (checked here) is the credential, so the
        # Host check against DNS rebinding has nothing left to protect.
        self.server.streamable_http_app(
            streamable_http_path=PATH,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )

    async def pool_of(self, ctx: Context) -> SandboxPool:
        headers = ctx.headers or {}
        key = presented_key(headers)
        if key is None:  # the endpoint refused such requests already
            raise PermissionError("missing API key")
        session = headers.get(SESSION_HEADER, "")
        name = hashlib.sha256(f"{key}\0{session}".encode()).hexdigest()
        async with self._lock:
            pool = self.pools.get(name)
            if pool is None:
                client = AsyncClient(self.url, key)
                pool = SandboxPool(
                    client, self.template, kill_on_close=False, default_ttl=DEFAULT_TTL
                )
                self.pools[name] = pool
                while len(self.pools) > MAX_POOLS:
                    _, oldest = self.pools.popitem(last=False)
                    await oldest.close()
            self.pools.move_to_end(name)
            return pool

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            record = self.api_keys.verify(presented_key(headers))
        except Exception as exc:  # Unauthorized: say why, as the API does
            await _refuse(send, 401, str(exc))
            return
        note = current_note()
        if note is not None:  # the audit log names the key (its tools' calls go to the API)
            note.principal = principal_of(record)
        await self.server.session_manager.handle_request(scope, receive, send)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.server.session_manager.run():
            try:
                yield
            finally:
                for pool in list(self.pools.values()):
                    await pool.close()
                self.pools.clear()


async def _refuse(send: Send, status: int, message: str) -> None:
    body = json.dumps({"code": "unauthorized", "message": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="corral"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def install(app: FastAPI, api_keys: ApiKeys, listen: str) -> McpOverHttp:
    """Serve ``/mcp`` from ``app`` (the daemon listening on ``listen``), checking callers'
    keys with ``api_keys``; the app's lifespan must enter ``running()``."""
    endpoint = McpOverHttp(api_keys, listen)
    # An ASGI app as the endpoint (not a request handler): Starlette passes it the raw scope.
    app.router.routes.append(Route(PATH, endpoint, methods=["GET", "POST", "DELETE"]))
    return endpoint
