"""The FastAPI application: routers, authentication, error mapping, workspace lifespan."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse

from corral.api.deps import authorize_route
from corral.api.errors import AsciiJSONResponse, install_error_handlers
from corral.api.limits import BodyLimits, BodyRule
from corral.api.metrics import ApiMetrics
from corral.api.observe import Observe
from corral.api.openapi_document import OPENAPI_URL, openapi_router
from corral.api.openapi_document import prepare as prepare_openapi
from corral.api.routes import (
    audit,
    code,
    console,
    events,
    files,
    health,
    keys,
    metrics,
    policy,
    ports,
    processes,
    recipes,
    sandbox_metrics,
    sandboxes,
    secrets,
    services,
    snapshots,
    templates,
    trust,
    workspace,
)
from corral.api.timing import ServerTiming
from corral.config import Settings
from corral.console import install as install_console
from corral.e2b import install as install_e2b
from corral.mcp.http import install as install_mcp
from corral.service.workspace import Workspace

KIB = 1024
MIB = 1024 * 1024


def create_app(
    ws: Workspace,
    *,
    manage_lifespan: bool = True,
    console_dir: Path | None = None,
    closing: Sequence[Callable[[], Awaitable[None]]] = (),
) -> FastAPI:
    """Build the app for a workspace; with ``manage_lifespan`` the app starts and stops it.
    ``console_dir`` holds the built console (default: the package's own build); ``closing``:
    what the app's edges beside it hold (the inbound proxy), closed at shutdown before the
    workspace stops, like the E2B front's port forwarder."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # The OpenAPI document is built in a thread beside the workspace's start, and is ready
        # before the listener opens (uvicorn listens once this startup is done): no request
        # ever waits on it, nor stalls the loop for it (api/openapi_document.py).
        document = prepare_openapi(app)
        if manage_lifespan:
            await ws.start()
        await document
        try:
            async with mcp_http.running():
                yield
        finally:
            for close in (*closing, e2b_ports.aclose):
                await close()
            if manage_lifespan:
                await ws.stop()

    app = FastAPI(
        title="corral",
        version="0.1.0",
        summary="Self-hosted sandboxes for AI agents",
        lifespan=lifespan,
        default_response_class=AsciiJSONResponse,
        # The interactive docs answer only with a key (below); /openapi.json stays open and
        # is served from a build off the event loop (api/openapi_document.py).
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.workspace = ws
    app.state.metrics = ApiMetrics(ws)
    install_error_handlers(app)
    add_body_limits(app, ws.settings)
    app.add_middleware(Observe, audit=ws.audit, metrics=app.state.metrics)
    if ws.settings.server_timing:
        app.add_middleware(ServerTiming)
    app.include_router(health.router)
    app.include_router(openapi_router(app))
    # Every other route needs a key with the route's permission (api/permissions.py).
    authed = [Depends(authorize_route)]
    for module in (
        workspace,
        templates,
        recipes,
        sandboxes,
        sandbox_metrics,
        processes,
        code,
        files,
        snapshots,
        trust,
        services,
        keys,
        policy,
        audit,
        events,
        metrics,
        ports,
        secrets,
        console,
    ):
        app.include_router(module.router, dependencies=authed)
    app.include_router(docs_router(app), dependencies=authed)
    e2b_ports = install_e2b(app, ws)
    install_console(app, console_dir)
    mcp_http = install_mcp(app, ws.api_keys, ws.settings.listen)
    return app


def add_body_limits(app: FastAPI, settings: Settings) -> None:
    """Bound every request body (see ``api/limits.py``); the limits are the settings'."""
    sandbox = r"/v1/sandboxes/[^/]+"
    rules = [
        BodyRule(
            "PUT",
            re.compile(sandbox + "/files/content"),
            settings.max_disk_mib * MIB,
            "a file write (the largest sandbox disk)",
            streamed=True,
        ),
        BodyRule(
            "POST",
            re.compile("/v1/import"),
            (settings.max_import_mib or settings.max_memory_mib + settings.max_disk_mib) * MIB,
            "an import upload",
            streamed=True,
        ),
        BodyRule(
            "POST",
            re.compile("/v1/templates/uploads"),
            settings.build_upload_max_mib * MIB,
            "a build upload",
            streamed=True,
        ),
        BodyRule(
            "POST",
            re.compile(sandbox + "/processes/[^/]+/stdin"),
            settings.max_stdin_chunk_kib * KIB,
            "one stdin write",
        ),
    ]
    app.add_middleware(BodyLimits, rules=rules, default=settings.max_json_body_kib * KIB)


def docs_router(app: FastAPI) -> APIRouter:
    """``/docs`` (Swagger UI) and ``/redoc``, which need the key like every other page."""
    router = APIRouter(include_in_schema=False)
    openapi_url = OPENAPI_URL

    @router.get("/docs")
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=openapi_url, title=f"{app.title} - Swagger UI")

    @router.get("/redoc")
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=openapi_url, title=f"{app.title} - ReDoc")

    return router
