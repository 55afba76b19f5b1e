"""Snapshots (take, list, remove, export) and import of exported files."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse

from corral.api import schemas
from corral.api.deps import SnapshotsDep, TransferDep
from corral.api.routes.sandboxes import to_schema
from corral.service.records import SnapshotRecord

router = APIRouter(prefix="/v1", tags=["snapshots"])


def snapshot_schema(record: SnapshotRecord) -> schemas.Snapshot:
    return schemas.Snapshot(
        name=record.name,
        kind=record.kind,  # type: ignore[arg-type]
        source_id=record.source_id,
        template=record.template,
        cpu=record.cpu,
        memory_mib=record.memory_mib,
        disk_mib=record.disk_mib,
        size_mib=record.size_mib,
        created_at=record.created_at,
    )


@router.post(
    "/sandboxes/{sandbox_id}/snapshots",
    operation_id="snapshot_sandbox",
    status_code=201,
    response_model=schemas.Snapshot,
)
async def snapshot_sandbox(
    sandbox_id: str, body: schemas.SnapshotCreate, snapshots: SnapshotsDep
) -> schemas.Snapshot:
    record = await snapshots.take(
        sandbox_id, body.name, fs_only=body.fs_only, allow_secrets=body.allow_secrets
    )
    return snapshot_schema(record)


@router.get("/snapshots", operation_id="list_snapshots", response_model=schemas.SnapshotList)
async def list_snapshots(snapshots: SnapshotsDep) -> schemas.SnapshotList:
    return schemas.SnapshotList(snapshots=[snapshot_schema(s) for s in snapshots.list()])


@router.get("/snapshots/{name}", operation_id="get_snapshot", response_model=schemas.Snapshot)
async def get_snapshot(name: str, snapshots: SnapshotsDep) -> schemas.Snapshot:
    return snapshot_schema(snapshots.get(name))


@router.delete("/snapshots/{name}", operation_id="remove_snapshot", status_code=204)
async def remove_snapshot(name: str, snapshots: SnapshotsDep) -> Response:
    await snapshots.remove(name)
    return Response(status_code=204)


@router.get(
    "/snapshots/{name}/export",
    operation_id="export_snapshot",
    responses={200: {"content": {"application/x-tar": {}}}},
)
async def export_snapshot(name: str, transfer: TransferDep) -> StreamingResponse:
    return StreamingResponse(transfer.export_snapshot(name), media_type="application/x-tar")


@router.post(
    "/import", operation_id="import_file", status_code=201, response_model=schemas.ImportResult
)
async def import_file(
    request: Request,
    transfer: TransferDep,
    fs_only: bool = Query(
        False, description="import an untrusted export's files only (never its memory)"
    ),
) -> schemas.ImportResult:
    imported = await transfer.import_file(request.stream(), fs_only=fs_only)
    record, signer = imported.record, imported.signer
    by = schemas.ImportSigner(
        name=signer.name if signer else None, public_key=signer.public_key if signer else None
    )
    if isinstance(record, SnapshotRecord):
        return schemas.ImportResult(kind="snapshot", snapshot=snapshot_schema(record), signer=by)
    return schemas.ImportResult(kind="sandbox", sandbox=to_schema(record), signer=by)
