"""Wiring of the E2B front into the daemon's app, and the dispatcher that sends envd traffic.

The E2B SDK sends every envd request to ``E2B_SANDBOX_URL`` (here: the daemon's own URL) with
``E2b-Sandbox-Id`` / ``E2b-Sandbox-Port`` headers, or, behind a wildcard DNS name, to
``{port}-{id}.{domain}``. The dispatcher (ASGI middleware) picks such requests out before
corral's routes see them, checks the sandbox's access token (``X-Access-Token``), records what it
checked in internal headers, and hands them to envd's Connect services or its HTTP routes;
requests for the sandbox's other ports go to ``ports`` (with the envd or the traffic token).
Everything else goes on to the app (where ``rest`` serves the E2B control API).
"""

from __future__ import annotations

import json
import re
from typing import Any

from connectrpc.server import ConnectASGIApplication
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from corral.e2b import metrics, rest, snapshots
from corral.e2b.context import INTERNAL_HEADERS, SANDBOX_HEADER, TOKEN_OK_HEADER
from corral.e2b.envd.filesystem.filesystem_connect import FilesystemASGIApplication
from corral.e2b.envd.process.process_connect import ProcessASGIApplication
from corral.e2b.files import EnvdHttp
from corral.e2b.filesystem import FilesystemHandler
from corral.e2b.ports import PortForwarder
from corral.e2b.process import ProcessHandler
from corral.e2b.tokens import AccessTokens, load_secret
from corral.service.workspace import Workspace

ENVD_PORT = 49983
HOST_RE = re.compile(r"^(\d{1,5})-([A-Za-z0-9-]{1,64})\.")
MAX_READ_BYTES = 8 << 20


async def _answer(send: Send, status: int, message: str) -> None:
    body = json.dumps({"code": status, "message": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def addressed_sandbox(headers: dict[bytes, bytes]) -> tuple[str, int] | None:
    """The (sandbox id, port) a request is for, from E2B's headers or its host name."""
    sandbox_id = headers.get(b"e2b-sandbox-id", b"").decode("latin-1")
    if sandbox_id:
        raw_port = headers.get(b"e2b-sandbox-port", b"").decode("latin-1") or str(ENVD_PORT)
        return sandbox_id, int(raw_port) if raw_port.isdigit() else -1
    host = headers.get(b"host", b"").decode("latin-1")
    match = HOST_RE.match(host)
    if match:
        return match.group(2), int(match.group(1))
    return None


class EnvdDispatch:
    """ASGI middleware: envd requests to envd, everything else to ``app``."""

    def __init__(
        self,
        app: ASGIApp,
        process: ASGIApp,
        filesystem: ASGIApp,
        http: ASGIApp,
        ports: PortForwarder,
    ) -> None:
        self.app = app
        self.process = process
        self.filesystem = filesystem
        self.http = http
        self.ports = ports

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        path: str = scope["path"]
        target = addressed_sandbox(headers)
        signed_files = path == "/files" and b"signature=" in scope.get("query_string", b"")
        if target is None and not signed_files:
            await self.app(scope, receive, send)
            return
        sandbox_id, port = target if target is not None else ("", ENVD_PORT)
        tokens: AccessTokens = scope["app"].state.e2b_tokens
        presented = headers.get(b"x-access-token", b"").decode("latin-1")
        token_ok = bool(sandbox_id) and tokens.check(sandbox_id, presented)
        if port != ENVD_PORT:
            await self._to_port(scope, receive, send, sandbox_id, port, token_ok, tokens)
            return
        if not token_ok and path not in ("/files", "/health"):
            await _answer(send, 401, f"wrong or missing X-Access-Token for sandbox {sandbox_id}")
            return
        inner = [(k, v) for k, v in scope["headers"] if k not in INTERNAL_HEADERS]
        inner.append((SANDBOX_HEADER.encode(), sandbox_id.encode()))
        inner.append((TOKEN_OK_HEADER.encode(), b"1" if token_ok else b"0"))
        scope = {**scope, "headers": inner}
        if path.startswith("/process.Process/"):
            await self.process(scope, receive, send)
        elif path.startswith("/filesystem.Filesystem/"):
            await self.filesystem(scope, receive, send)
        elif path in ("/files", "/health"):
            await self.http(scope, receive, send)
        else:
            await _answer(send, 404, f"envd of corral has no route {path}")

    async def _to_port(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        sandbox_id: str,
        port: int,
        token_ok: bool,
        tokens: AccessTokens,
    ) -> None:
        """Another port of the sandbox: with its envd or traffic token, to ``ports``."""
        if not 0 < port < 65536:
            await _answer(send, 400, "E2b-Sandbox-Port must be a port number (1 to 65535)")
            return
        traffic = dict(scope["headers"]).get(b"e2b-traffic-access-token", b"").decode("latin-1")
        if not (token_ok or tokens.check_traffic(sandbox_id, traffic)):
            await _answer(
                send,
                401,
                f"port {port} of sandbox {sandbox_id} needs its E2B-Traffic-Access-Token "
                "or X-Access-Token",
            )
            return
        await self.ports(sandbox_id, port, scope, receive, send)


def install(app: FastAPI, ws: Workspace) -> PortForwarder:
    """Serve the E2B control API and envd of ``ws`` from ``app`` (whose ``state.workspace`` it
    is). Returns the forwarder to sandboxes' other ports, which the app closes at shutdown."""
    data_dir = ws.settings.data_dir
    app.state.e2b_tokens = AccessTokens(lambda: load_secret(data_dir))
    app.include_router(metrics.router)  # before rest: /sandboxes/metrics is not an id
    app.include_router(rest.router)
    app.include_router(snapshots.router)
    process: ConnectASGIApplication[Any] = ProcessASGIApplication(
        ProcessHandler(ws.processes), read_max_bytes=MAX_READ_BYTES
    )
    filesystem: ConnectASGIApplication[Any] = FilesystemASGIApplication(
        FilesystemHandler(ws.files), read_max_bytes=MAX_READ_BYTES
    )
    ports = PortForwarder(ws.ports)
    app.add_middleware(
        EnvdDispatch,
        process=process,
        filesystem=filesystem,
        http=EnvdHttp(ws.files, ws.sandboxes).router(),
        ports=ports,
    )
    return ports
