"""Brokered secrets (admin only): store, rotate, remove, list (never values), the audit log,
and revoking one sandbox's binding."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from corral.api import schemas
from corral.api.deps import SandboxesDep, SecretsDep
from corral.service.records import SecretRecord
from corral.service.secrets import SecretService, options_of

# Admin keys only: api/permissions.py (scope "secrets").
router = APIRouter(tags=["secrets"])


def secret_schema(record: SecretRecord, service: SecretService) -> schemas.Secret:
    options = options_of(record)
    return schemas.Secret(
        name=record.name,
        preset=record.preset,
        hosts=record.hosts,
        header=options.header,
        scheme=options.scheme,
        query=options.query,
        body=options.body,
        created_at=record.created_at,
        updated_at=record.updated_at,
        last_used_at=record.last_used_at,
        sandboxes=service.bound_sandboxes(record.name),
    )


@router.get("/v1/secrets", operation_id="list_secrets", response_model=schemas.SecretList)
async def list_secrets(secrets: SecretsDep) -> schemas.SecretList:
    return schemas.SecretList(secrets=[secret_schema(r, secrets) for r in secrets.list()])


@router.get("/v1/secrets/log", operation_id="secret_log", response_model=schemas.SecretLog)
async def secret_log(
    secrets: SecretsDep,
    secret: str | None = None,
    sandbox_id: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> schemas.SecretLog:
    entries = secrets.audit_log(secret=secret, sandbox_id=sandbox_id, limit=limit)
    return schemas.SecretLog(
        entries=[
            schemas.SecretAuditEntry(
                at=e.at,
                sandbox_id=e.sandbox_id,
                secret=e.secret,
                host=e.host,
                method=e.method,
                path=e.path,
            )
            for e in entries
        ]
    )


@router.get("/v1/secrets/{name}", operation_id="get_secret", response_model=schemas.Secret)
async def get_secret(name: str, secrets: SecretsDep) -> schemas.Secret:
    return secret_schema(secrets.get(name), secrets)


@router.put("/v1/secrets/{name}", operation_id="put_secret", response_model=schemas.Secret)
async def put_secret(name: str, body: schemas.SecretSet, secrets: SecretsDep) -> schemas.Secret:
    record = secrets.set(
        name,
        body.value,
        preset=body.preset,
        hosts=body.hosts,
        header=body.header,
        scheme=body.scheme,
        query=body.query,
        body=body.body,
    )
    return secret_schema(record, secrets)


@router.post(
    "/v1/secrets/{name}/rotate", operation_id="rotate_secret", response_model=schemas.Secret
)
async def rotate_secret(
    name: str, body: schemas.SecretRotate, secrets: SecretsDep
) -> schemas.Secret:
    return secret_schema(secrets.rotate(name, body.value), secrets)


@router.delete("/v1/secrets/{name}", operation_id="remove_secret", status_code=204)
async def remove_secret(name: str, secrets: SecretsDep) -> Response:
    secrets.remove(name)
    return Response(status_code=204)


@router.delete(
    "/v1/sandboxes/{sandbox_id}/secrets/{name}", operation_id="revoke_secret", status_code=204
)
async def revoke_secret(
    sandbox_id: str, name: str, sandboxes: SandboxesDep, secrets: SecretsDep
) -> Response:
    sandboxes.get(sandbox_id)
    secrets.revoke(sandbox_id, name)
    return Response(status_code=204)
