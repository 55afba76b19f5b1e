"""API keys: create (shown once), list (never the key), revoke; and the calling key itself."""

from __future__ import annotations

import time

from fastapi import APIRouter, Response

from corral.api import schemas_access as schemas
from corral.api.deps import AdmissionDep, ApiKeysDep, PrincipalDep
from corral.service.records import ApiKeyRecord

router = APIRouter(prefix="/v1/keys", tags=["keys"])


def key_info(record: ApiKeyRecord) -> schemas.KeyInfo:
    return schemas.KeyInfo(
        name=record.name,
        role=record.role,  # type: ignore[arg-type]
        scopes=list(record.scopes) if record.scopes is not None else None,
        created_at=record.created_at,
        created_by=record.created_by,
        last_used_at=record.last_used_at,
        expires_at=record.expires_at,
        quotas=schemas.Quotas.model_validate(record.quotas),
        rate_limit=record.rate_limit,
    )


@router.post("", operation_id="create_key", status_code=201, response_model=schemas.KeyCreated)
async def create_key(
    body: schemas.KeyCreate, api_keys: ApiKeysDep, principal: PrincipalDep
) -> schemas.KeyCreated:
    expires = time.time() + body.expires_in_seconds if body.expires_in_seconds else None
    key, record = api_keys.issue(
        body.name,
        body.role,
        scopes=list(body.scopes) if body.scopes is not None else None,
        expires_at=expires,
        quotas=body.quotas.model_dump(exclude_none=True),
        rate_limit=body.rate_limit,
        created_by=principal.name,
    )
    return schemas.KeyCreated(key=key, **key_info(record).model_dump())


@router.get("", operation_id="list_keys", response_model=schemas.KeyList)
async def list_keys(api_keys: ApiKeysDep) -> schemas.KeyList:
    return schemas.KeyList(keys=[key_info(r) for r in api_keys.list()])


@router.get("/self", operation_id="get_self", response_model=schemas.KeySelf)
async def get_self(
    api_keys: ApiKeysDep, admission: AdmissionDep, principal: PrincipalDep
) -> schemas.KeySelf:
    record = api_keys.get(principal.name)
    used = admission.usage(record.id)
    usage = schemas.Usage(
        running=int(used.running),
        cpu=used.cpu,
        memory_mib=int(used.memory_mib),
        disk_mib=int(used.disk_mib),
        parked=int(used.parked),
    )
    return schemas.KeySelf(usage=usage, **key_info(record).model_dump())


@router.delete("/{name}", operation_id="revoke_key", status_code=204)
async def revoke_key(name: str, api_keys: ApiKeysDep, principal: PrincipalDep) -> Response:
    api_keys.revoke(name, by=principal)
    return Response(status_code=204)
