"""E2B's fork and snapshot routes over corral's fork and snapshots.

A fork continues the running sandbox in new ones, processes included. E2B names a snapshot by
its id and starts a sandbox from it by giving that id as the template (``rest.create_sandbox``
restores it); ``DELETE /templates/{id}`` deletes snapshots only, never corral templates.
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from corral.e2b.bodies import json_body, positive_int
from corral.e2b.deps import LifecycleDep, SandboxesDep, SettingsDep, SnapshotsDep
from corral.e2b.rest import (
    WRITES,
    created_body,
    find,
    guarded,
    require_api_key,
)
from corral.service.errors import InvalidRequest
from corral.service.model import SandboxState

router = APIRouter(tags=["e2b"], dependencies=[Depends(require_api_key)], include_in_schema=False)


@router.post("/sandboxes/{sandbox_id}/fork", dependencies=WRITES)
async def fork_sandbox(
    sandbox_id: str,
    request: Request,
    settings: SettingsDep,
    sandboxes: SandboxesDep,
    lifecycle: LifecycleDep,
) -> Response:
    async def run() -> Response:
        find(sandboxes, sandbox_id)
        body = await json_body(request)
        count = positive_int(body, "count") or 1
        seconds = positive_int(body, "timeout")
        results = []
        for record in await lifecycle.fork(sandbox_id, count):
            if seconds is not None:
                record = sandboxes.set_timeout(record.id, seconds)
            results.append({"sandbox": created_body(record, request, settings)})
        return JSONResponse(results, status_code=201)

    return await guarded(run)


def snapshot_body(name: str) -> dict[str, Any]:
    return {"snapshotID": name, "names": [name]}


@router.post("/sandboxes/{sandbox_id}/snapshots", dependencies=WRITES)
async def snapshot_sandbox(
    sandbox_id: str,
    request: Request,
    sandboxes: SandboxesDep,
    lifecycle: LifecycleDep,
    snapshots: SnapshotsDep,
) -> Response:
    async def run() -> Response:
        find(sandboxes, sandbox_id)
        body = await json_body(request)
        name = body.get("name") or f"snap-{secrets.token_hex(6)}"
        if not isinstance(name, str):
            raise InvalidRequest("'name' must be a string")
        if sandboxes.get(sandbox_id).state == SandboxState.PARKED:
            await lifecycle.wake(sandbox_id)
        record = await snapshots.take(sandbox_id, name, fs_only=body.get("memory") is False)
        return JSONResponse(snapshot_body(record.name), status_code=201)

    return await guarded(run)


@router.get("/snapshots")
async def list_snapshots(request: Request, snapshots: SnapshotsDep) -> Response:
    async def run() -> Response:
        source = request.query_params.get("sandboxID")
        records = [r for r in snapshots.list() if r.state == "ready"]
        if source:
            records = [r for r in records if r.source_id == source]
        return JSONResponse([snapshot_body(r.name) for r in records])

    return await guarded(run)


@router.delete("/templates/{template_id}", dependencies=WRITES)
async def delete_snapshot(template_id: str, snapshots: SnapshotsDep) -> Response:
    """E2B deletes snapshots by their id here; corral's templates are not deleted this way."""

    async def run() -> Response:
        snapshots.get(template_id)
        await snapshots.remove(template_id)
        return Response(status_code=204)

    return await guarded(run)
