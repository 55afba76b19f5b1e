"""ASGI middleware answering where a call's time went: a ``Server-Timing`` header.

With the ``server_timing`` setting on, every HTTP request runs inside a ``corral.timing``
collector, and the answer carries the phases its path marked (``runsc restore``, ``db commit``,
``slot lease``, ...) as ``Server-Timing: runsc-restore;dur=190.12, db-commit;dur=4.51;desc="x3"``
(ms; ``desc`` the count of a step that ran more than once), then ``total`` (the request's wall
time up to its answer's head). A request that marked nothing gets no header. Off by default:
the figures are for benches and operators (``bench/lifecycle.py --breakdown``), not for every
caller.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral.timing import collecting, server_timing

__all__ = ["ServerTiming"]


class ServerTiming:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        with collecting() as phases:

            async def timing_send(message: Message) -> None:
                if message["type"] == "http.response.start" and phases.totals:
                    total = (time.perf_counter() - started) * 1000
                    value = f"{server_timing(phases)}, total;dur={total:.2f}"
                    headers = list(message.get("headers", []))
                    headers.append((b"server-timing", value.encode("latin-1")))
                    message = {**message, "headers": headers}
                await send(message)

            await self.app(scope, receive, timing_send)
