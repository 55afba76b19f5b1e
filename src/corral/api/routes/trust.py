"""Trusted signers of exports (admin only): this workspace's public key, and the keys whose
signed exports are imported with their memory."""

from __future__ import annotations

from fastapi import APIRouter, Response

from corral.api import schemas
from corral.api.deps import TrustDep
from corral.service.records import TrustedKeyRecord

# Admin keys only: api/permissions.py (scope "trust").
router = APIRouter(prefix="/v1/trust", tags=["trust"])


def key_schema(record: TrustedKeyRecord) -> schemas.TrustedKey:
    return schemas.TrustedKey(
        name=record.name, public_key=record.public_key, created_at=record.created_at
    )


@router.get("", operation_id="list_trusted_keys", response_model=schemas.TrustList)
async def list_trusted_keys(trust: TrustDep) -> schemas.TrustList:
    return schemas.TrustList(
        public_key=trust.public_key, keys=[key_schema(r) for r in trust.list()]
    )


@router.get("/self", operation_id="get_workspace_key", response_model=schemas.WorkspaceKey)
async def get_workspace_key(trust: TrustDep) -> schemas.WorkspaceKey:
    return schemas.WorkspaceKey(public_key=trust.public_key)


@router.post("", operation_id="add_trusted_key", status_code=201, response_model=schemas.TrustedKey)
async def add_trusted_key(body: schemas.TrustedKeyCreate, trust: TrustDep) -> schemas.TrustedKey:
    return key_schema(trust.add(body.name, body.public_key))


@router.delete("/{name}", operation_id="remove_trusted_key", status_code=204)
async def remove_trusted_key(name: str, trust: TrustDep) -> Response:
    trust.remove(name)
    return Response(status_code=204)
