"""Request body bounds: every body the API accepts has a size limit, checked before a handler
sees it.

Each route falls under one ``BodyRule``: small bodies (JSON, stdin) are read whole here up to their
limit and handed on, or refused with 413 ``too_large`` before anything ran; streamed bodies (file
content, imports) are refused at once when their Content-Length says they are over, and otherwise
cut off by ``TooLarge`` (raised from ``receive``) once more than the limit has arrived. A streamed
body's owner may bound it further (a file write by its sandbox's disk, ``service/files.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral.api.errors import error_response
from corral.service.errors import TooLarge

__all__ = ["BodyLimits", "BodyRule", "describe_size"]


def describe_size(size: int) -> str:
    """``1 MiB``, ``64 KiB`` or ``100 bytes``: sizes as an error message says them."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"


@dataclass(frozen=True)
class BodyRule:
    """Bodies of ``method`` requests whose path matches ``path`` are at most ``limit`` bytes.

    ``what`` names the body in errors ("a file write"); ``streamed`` bodies are passed on as they
    arrive (never held here), the others are read whole first."""

    method: str
    path: re.Pattern[str]
    limit: int
    what: str
    streamed: bool = False


class BodyLimits:
    """ASGI middleware applying the first matching ``BodyRule``, else ``default`` (JSON bodies)."""

    def __init__(self, app: ASGIApp, *, rules: list[BodyRule], default: int) -> None:
        self.app = app
        self.rules = rules
        self.default = BodyRule("*", re.compile(""), default, "a request body (JSON)")

    def rule_for(self, method: str, path: str) -> BodyRule:
        for rule in self.rules:
            if rule.method == method and rule.path.fullmatch(path):
                return rule
        return self.default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rule = self.rule_for(scope["method"], scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > rule.limit:
            await self._refuse(rule, scope, receive, send, f"it declares {declared} bytes")
            return
        if rule.streamed:
            await self.app(scope, _counting(receive, rule), send)
            return
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away: let the app see it
            body = message.get("body", b"")
            size += len(body)
            if size > rule.limit:
                await self._refuse(rule, scope, receive, send, "more arrived")
                return
            parts.append(body)
            if not message.get("more_body", False):
                break
        whole: list[Message] = [{"type": "http.request", "body": b"".join(parts)}]

        async def replay() -> Message:
            return whole.pop() if whole else await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(rule: BodyRule, scope: Scope, receive: Receive, send: Send, why: str) -> None:
        response = error_response(413, TooLarge.code, too_large_message(rule, why))
        await response(scope, receive, send)


def too_large_message(rule: BodyRule, why: str) -> str:
    return (
        f"{rule.what} may be at most {describe_size(rule.limit)} ({why}); "
        "send less, or in several requests"
    )


def _counting(receive: Receive, rule: BodyRule) -> Receive:
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > rule.limit:
                raise TooLarge(too_large_message(rule, f"{seen} bytes arrived"))
        return message

    return counted


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
