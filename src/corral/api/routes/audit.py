"""The audit log: filtered queries, as JSON or as JSON lines (an export)."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query, Response

from corral.api import schemas_access as schemas
from corral.api.deps import AuditDep
from corral.service.records import AuditEntry

router = APIRouter(prefix="/v1/audit", tags=["audit"])


def entry_schema(entry: AuditEntry) -> schemas.AuditEntry:
    return schemas.AuditEntry(
        id=entry.id,
        at=entry.at,
        key_name=entry.key_name,
        action=entry.action,
        method=entry.method,
        path=entry.path,
        target=entry.target,
        status=entry.status,
        result=entry.result,
        source=entry.source,
        detail=entry.detail,
    )


@router.get(
    "",
    operation_id="query_audit",
    response_model=schemas.AuditList,
    responses={200: {"content": {"application/x-ndjson": {}}}},
)
async def query_audit(
    audit: AuditDep,
    key: Annotated[str | None, Query(max_length=64, description="a key's name")] = None,
    sandbox: Annotated[
        str | None, Query(max_length=253, description="a sandbox id (or other target)")
    ] = None,
    since: Annotated[float | None, Query(description="unix time")] = None,
    after: Annotated[int, Query(ge=0, description="entries after this id")] = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
    format: Annotated[str, Query(pattern="^(json|jsonl)$")] = "json",
) -> Response:
    entries = await audit.query(
        key_name=key, target=sandbox, since=since, after_id=after, limit=limit
    )
    if format == "jsonl":
        lines = "".join(json.dumps(entry_schema(e).model_dump()) + "\n" for e in entries)
        return Response(lines, media_type="application/x-ndjson")
    body = schemas.AuditList(entries=[entry_schema(e) for e in entries])
    return Response(body.model_dump_json(), media_type="application/json")
