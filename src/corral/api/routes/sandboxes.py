"""Sandboxes: create, list, get, kill."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from corral.api import schemas
from corral.api.deps import SandboxesDep
from corral.service.errors import InvalidRequest
from corral.service.sandboxes import CreateRequest
from corral.storage import SandboxRecord

router = APIRouter(prefix="/v1/sandboxes", tags=["sandboxes"])


def to_schema(record: SandboxRecord) -> schemas.Sandbox:
    return schemas.Sandbox(
        id=record.id,
        state=record.state,  # type: ignore[arg-type]
        template=record.template,
        cpu=record.cpu,
        memory_mib=record.memory_mib,
        disk_mib=record.disk_mib,
        env=record.env,
        metadata=record.metadata,
        created_at=record.created_at,
        expires_at=record.expires_at,
        error=record.error,
    )


@router.post("", operation_id="create_sandbox", status_code=201, response_model=schemas.Sandbox)
async def create_sandbox(body: schemas.SandboxCreate, sandboxes: SandboxesDep) -> schemas.Sandbox:
    record = await sandboxes.create(
        CreateRequest(
            template=body.template,
            cpu=body.cpu,
            memory_mib=body.memory_mib,
            disk_mib=body.disk_mib,
            env=body.env,
            metadata=body.metadata,
            ttl_seconds=body.ttl_seconds,
        )
    )
    return to_schema(record)


@router.get("", operation_id="list_sandboxes", response_model=schemas.SandboxList)
async def list_sandboxes(
    sandboxes: SandboxesDep,
    state: Annotated[list[str] | None, Query()] = None,
    metadata: Annotated[list[str] | None, Query(description="k=v, repeatable")] = None,
) -> schemas.SandboxList:
    wanted: dict[str, str] = {}
    for item in metadata or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"metadata filter must be KEY=VALUE, got {item!r}")
        wanted[key] = value
    records = sandboxes.list(states=state, metadata=wanted or None)
    return schemas.SandboxList(sandboxes=[to_schema(r) for r in records])


@router.get("/{sandbox_id}", operation_id="get_sandbox", response_model=schemas.Sandbox)
async def get_sandbox(sandbox_id: str, sandboxes: SandboxesDep) -> schemas.Sandbox:
    return to_schema(await sandboxes.refresh(sandbox_id))


@router.delete("/{sandbox_id}", operation_id="kill_sandbox", status_code=204)
async def kill_sandbox(sandbox_id: str, sandboxes: SandboxesDep) -> Response:
    await sandboxes.kill(sandbox_id)
    return Response(status_code=204)
