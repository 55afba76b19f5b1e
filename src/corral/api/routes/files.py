"""Files: streamed content read/write, stat, list, mkdir, move, remove."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from corral.api import schemas
from corral.api.deps import FilesDep, PathDep

router = APIRouter(prefix="/v1/sandboxes/{sandbox_id}/files", tags=["files"])


@router.get(
    "/content",
    operation_id="read_file",
    responses={200: {"content": {"application/octet-stream": {}}}},
)
async def read_file(sandbox_id: str, path: PathDep, files: FilesDep) -> StreamingResponse:
    chunks = await files.read(sandbox_id, path)
    return StreamingResponse(chunks, media_type="application/octet-stream")


@router.put("/content", operation_id="write_file", response_model=schemas.WriteResult)
async def write_file(
    sandbox_id: str,
    path: PathDep,
    request: Request,
    files: FilesDep,
    mode: int | None = None,
    parents: bool = True,
) -> schemas.WriteResult:
    declared = request.headers.get("content-length")
    size = int(declared) if declared and declared.isdigit() else None
    result = await files.write(sandbox_id, path, request.stream(), mode, parents, size)
    return schemas.WriteResult(**result)


@router.get("/stat", operation_id="stat_file", response_model=schemas.FileStat)
async def stat_file(sandbox_id: str, path: PathDep, files: FilesDep) -> schemas.FileStat:
    return schemas.FileStat(**await files.stat(sandbox_id, path))


@router.get("/list", operation_id="list_files", response_model=schemas.FileList)
async def list_files(
    sandbox_id: str, path: PathDep, files: FilesDep, depth: int = 1
) -> schemas.FileList:
    entries = await files.list_dir(sandbox_id, path, depth)
    return schemas.FileList(entries=[schemas.FileStat(**e) for e in entries])


@router.post("/mkdir", operation_id="make_dir", response_model=schemas.MkdirResult)
async def make_dir(
    sandbox_id: str, body: schemas.MkdirRequest, files: FilesDep
) -> schemas.MkdirResult:
    created = await files.mkdir(sandbox_id, body.path, body.parents)
    return schemas.MkdirResult(created=created)


@router.post("/move", operation_id="move_file", response_model=schemas.FileStat)
async def move_file(
    sandbox_id: str, body: schemas.MoveRequest, files: FilesDep
) -> schemas.FileStat:
    return schemas.FileStat(**await files.move(sandbox_id, body.src, body.dst))


@router.delete("", operation_id="remove_file", status_code=204)
async def remove_file(
    sandbox_id: str, path: PathDep, files: FilesDep, recursive: bool = False
) -> Response:
    await files.remove(sandbox_id, path, recursive)
    return Response(status_code=204)
