"""ASGI middleware that watches every answer: the audit log and the Prometheus metrics.

For each HTTP request it opens an ``AuditNote`` (filled in by the key check and the services),
lets the app answer, and then:

- records an audit entry for every mutating call (any method but GET, HEAD, OPTIONS) whatever
  its answer, and for every refused one (401, 403, 404, 413, 429: a refusal, or an id the key
  may not see); the action is the route's operation id, the target its sandbox id or name (or
  what the service noted, e.g. a new sandbox's id);
- observes the latency of the route (by operation id, so the label set stays bounded) and counts
  errors by their code.

It sits inside the E2B front's envd dispatcher: traffic for a sandbox's envd (authorized by the
sandbox's own access token) is neither audited nor timed here.
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral.api.metrics import ApiMetrics
from corral.errcodes import code_for_status
from corral.service import access
from corral.service.audit import AuditLog, begin_note, entry

READ_ONLY = {"GET", "HEAD", "OPTIONS"}
REFUSED = {401, 403, 404, 413, 429}
UNAUDITED_PATHS = {"/healthz", "/metrics"}
TARGET_PARAMS = ("sandbox_id", "name", "sandboxID", "snapshotID", "templateID")
MAX_ERROR_BODY = 4096


class Observe:
    def __init__(self, app: ASGIApp, *, audit: AuditLog, metrics: ApiMetrics) -> None:
        self.app = app
        self.audit = audit
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        note = begin_note()
        token = access.acting_as(access.SYSTEM)  # a key check sets the real one
        started = time.perf_counter()
        status = 500
        error_body = bytearray()
        done = False

        def finish() -> None:
            """Count and audit the answer, once: before its last byte leaves (so a caller that
            has the answer finds its entry), or when the request ends without one."""
            nonlocal done
            if done:
                return
            done = True
            route = scope.get("route")
            operation = getattr(route, "operation_id", None) or getattr(route, "name", None)
            self.metrics.observe(operation or "unmatched", status, time.perf_counter() - started)
            code = error_code(status, bytes(error_body)) if status >= 400 else ""
            if code:
                self.metrics.error(code)
            method = scope.get("method", "GET")
            path = scope.get("path", "")
            if path in UNAUDITED_PATHS or (method in READ_ONLY and status not in REFUSED):
                return
            self.audit.record(
                entry(
                    principal=note.principal,
                    action=operation or f"{method} {path}",
                    method=method,
                    path=path,
                    target=target_of(scope) or note.target,
                    status=status,
                    result=code or "ok",
                    source=source_of(scope),
                    detail=message_of(bytes(error_body)) if code else note.detail,
                )
            )

        async def watching_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                if status >= 400:
                    room = MAX_ERROR_BODY - len(error_body)
                    error_body.extend(message.get("body", b"")[: max(0, room)])
                if not message.get("more_body", False):
                    finish()
            await send(message)

        try:
            await self.app(scope, receive, watching_send)
        finally:
            access.reset(token)
            finish()


def target_of(scope: Scope) -> str | None:
    params: dict[str, Any] = scope.get("path_params") or {}
    for name in TARGET_PARAMS:
        value = params.get(name)
        if value:
            return str(value)
    return None


def source_of(scope: Scope) -> str | None:
    client = scope.get("client")
    return str(client[0]) if client else None


def _decoded(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def error_code(status: int, body: bytes) -> str:
    code = _decoded(body).get("code")
    return code if isinstance(code, str) and code else code_for_status(status)


def message_of(body: bytes) -> str | None:
    message = _decoded(body).get("message")
    return str(message) if message else None
