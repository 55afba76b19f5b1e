"""``GET /openapi.json``, built once in a worker thread instead of on the event loop.

FastAPI builds the OpenAPI document on its first request, synchronously in the handler: for this
app that is 1-3 s of CPU under load (2 cores), during which the daemon's event loop serves
nothing, so every sandbox's stream, proxied port and API call stalls with it (and a client's 5 s
timeout can pass). Here FastAPI's route is turned off (``FastAPI(openapi_url=None)``) and this one
serves the document from a single build in a worker thread: the app's lifespan starts it
(``prepare``) beside the workspace's start and awaits it before the listener opens; an app run
without its lifespan (unit tests) starts it at the first request. Concurrent requests await
that one build, and the loop keeps running meanwhile.

Invariant: the document is built once per app, after every route is added (routes are all added
by ``create_app`` before the app serves), and never on the event loop.
"""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, FastAPI
from fastapi.responses import Response

__all__ = ["OPENAPI_URL", "openapi_router", "prepare"]

OPENAPI_URL = "/openapi.json"


def _render(app: FastAPI) -> bytes:
    """The document as JSON bytes, rendered as Starlette's ``JSONResponse`` would."""
    document = app.openapi()
    return json.dumps(
        document, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


def prepare(app: FastAPI) -> asyncio.Future[bytes]:
    """The app's document build, started in a worker thread if it has not started yet."""
    built: asyncio.Future[bytes] | None = getattr(app.state, "openapi_document", None)
    if built is None:
        built = asyncio.get_running_loop().run_in_executor(None, _render, app)
        app.state.openapi_document = built
    return built


def openapi_router(app: FastAPI) -> APIRouter:
    """``GET /openapi.json``: open to every caller, like FastAPI's own route it replaces."""
    router = APIRouter(include_in_schema=False)

    @router.get(OPENAPI_URL)
    async def openapi_json() -> Response:
        return Response(await asyncio.shield(prepare(app)), media_type="application/json")

    return router
