"""The FastAPI application: routers, authentication, error mapping, workspace lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from corral.api.deps import VerifiedKeys, require_key
from corral.api.errors import AsciiJSONResponse, install_error_handlers
from corral.api.routes import (
    files,
    health,
    processes,
    sandboxes,
    snapshots,
    templates,
    trust,
    workspace,
)
from corral.e2b import install as install_e2b
from corral.service.workspace import Workspace


def create_app(ws: Workspace, *, manage_lifespan: bool = True) -> FastAPI:
    """Build the app for a workspace; with ``manage_lifespan`` the app starts and stops it."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if manage_lifespan:
            await ws.start()
        try:
            yield
        finally:
            if manage_lifespan:
                await ws.stop()

    app = FastAPI(
        title="corral",
        version="0.1.0",
        summary="Self-hosted sandboxes for AI agents",
        lifespan=lifespan,
        default_response_class=AsciiJSONResponse,
    )
    app.state.workspace = ws
    app.state.verified_keys = VerifiedKeys()
    install_error_handlers(app)
    app.include_router(health.router)
    authed = [Depends(require_key)]
    for module in (workspace, templates, sandboxes, processes, files, snapshots, trust):
        app.include_router(module.router, dependencies=authed)
    install_e2b(app)
    return app
