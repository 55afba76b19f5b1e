"""Trusted signers of exports (admin only): this workspace's public key, and the keys whose
signed exports are imported with their memory."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from corral.api import schemas
from corral.api.deps import WorkspaceDep, require_key
from corral.service.errors import Unauthorized
from corral.service.records import ApiKeyRecord, TrustedKeyRecord


def require_admin(key: Annotated[ApiKeyRecord, Depends(require_key)]) -> ApiKeyRecord:
    if key.role != "admin":
        raise Unauthorized(
            f"API key {key.name!r} has role {key.role!r}; trusting signers needs an admin key",
            code="forbidden",
        )
    return key


router = APIRouter(prefix="/v1/trust", tags=["trust"], dependencies=[Depends(require_admin)])


def key_schema(record: TrustedKeyRecord) -> schemas.TrustedKey:
    return schemas.TrustedKey(
        name=record.name, public_key=record.public_key, created_at=record.created_at
    )


@router.get("", operation_id="list_trusted_keys", response_model=schemas.TrustList)
async def list_trusted_keys(ws: WorkspaceDep) -> schemas.TrustList:
    return schemas.TrustList(
        public_key=ws.trust.public_key, keys=[key_schema(r) for r in ws.trust.list()]
    )


@router.get("/self", operation_id="get_workspace_key", response_model=schemas.WorkspaceKey)
async def get_workspace_key(ws: WorkspaceDep) -> schemas.WorkspaceKey:
    return schemas.WorkspaceKey(public_key=ws.trust.public_key)


@router.post("", operation_id="add_trusted_key", status_code=201, response_model=schemas.TrustedKey)
async def add_trusted_key(body: schemas.TrustedKeyCreate, ws: WorkspaceDep) -> schemas.TrustedKey:
    return key_schema(ws.trust.add(body.name, body.public_key))


@router.delete("/{name}", operation_id="remove_trusted_key", status_code=204)
async def remove_trusted_key(name: str, ws: WorkspaceDep) -> Response:
    ws.trust.remove(name)
    return Response(status_code=204)
