"""The E2B front's FastAPI dependencies: one typed dependency per service its control routes
call, and the daemon's settings (as ``api/deps.py`` does for corral's own API, which the E2B
front does not import). Each is ``async def`` (no worker thread) and reads one attribute of the
app's workspace."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from corral.config import Settings
from corral.service.create import SandboxCreator
from corral.service.lifecycle import LifecycleService
from corral.service.metrics import MetricsService
from corral.service.sandboxes import SandboxService
from corral.service.snapshots.service import SnapshotService
from corral.service.workspace import Workspace


def workspace_of(request: Request) -> Workspace:
    """The app's workspace: for the key check alone (``rest.require_api_key``); routes take
    the services below."""
    ws: Workspace = request.app.state.workspace
    return ws


async def _settings(request: Request) -> Settings:
    return workspace_of(request).settings


async def _sandboxes(request: Request) -> SandboxService:
    return workspace_of(request).sandboxes


async def _creator(request: Request) -> SandboxCreator:
    return workspace_of(request).creator


async def _lifecycle(request: Request) -> LifecycleService:
    return workspace_of(request).lifecycle


async def _snapshots(request: Request) -> SnapshotService:
    return workspace_of(request).snapshots


async def _metrics(request: Request) -> MetricsService:
    return workspace_of(request).metrics


SettingsDep = Annotated[Settings, Depends(_settings)]
SandboxesDep = Annotated[SandboxService, Depends(_sandboxes)]
CreatorDep = Annotated[SandboxCreator, Depends(_creator)]
LifecycleDep = Annotated[LifecycleService, Depends(_lifecycle)]
SnapshotsDep = Annotated[SnapshotService, Depends(_snapshots)]
MetricsDep = Annotated[MetricsService, Depends(_metrics)]
