"""Processes: exec (streamed NDJSON or background), terminals (pty), list, events, stdin,
resize, signals."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from corral.api import schemas
from corral.api.deps import ProcessesDep
from corral.api.streams import NDJSON, is_exit, ndjson_response
from corral.service.model import ExecSpec, PtySize

router = APIRouter(prefix="/v1/sandboxes/{sandbox_id}", tags=["processes"])


@router.post(
    "/exec",
    operation_id="exec_command",
    responses={
        200: {"content": {NDJSON: {}}, "description": "event stream (foreground)"},
        201: {"model": schemas.ProcessStarted, "description": "started (background)"},
    },
)
async def exec_command(
    sandbox_id: str, body: schemas.ExecRequest, processes: ProcessesDep
) -> Response:
    spec = ExecSpec(
        cmd=body.cmd,
        shell=body.shell,
        env=body.env,
        cwd=body.cwd,
        user=body.user,
        stdin=body.stdin,
        timeout=body.timeout,
        tag=body.tag,
    )
    if body.background:
        pid = await processes.start(sandbox_id, spec)
        return JSONResponse({"pid": pid}, status_code=201)
    events = await processes.exec_stream(sandbox_id, spec)
    return ndjson_response(events, ends_with=is_exit)


@router.get("/processes", operation_id="list_processes", response_model=schemas.ProcessList)
async def list_processes(sandbox_id: str, processes: ProcessesDep) -> schemas.ProcessList:
    items = await processes.list_processes(sandbox_id)
    return schemas.ProcessList(processes=[schemas.ProcessInfo(**p) for p in items])


@router.get("/processes/{pid}", operation_id="get_process", response_model=schemas.ProcessInfo)
async def get_process(sandbox_id: str, pid: int, processes: ProcessesDep) -> schemas.ProcessInfo:
    return schemas.ProcessInfo(**await processes.get_process(sandbox_id, pid))


@router.get(
    "/processes/{pid}/events",
    operation_id="process_events",
    responses={200: {"content": {NDJSON: {}}}},
)
async def process_events(
    sandbox_id: str, pid: int, processes: ProcessesDep, after: int = -1, follow: bool = True
) -> StreamingResponse:
    events = await processes.events(sandbox_id, pid, after, follow)
    return ndjson_response(events, ends_with=is_exit)


@router.post("/processes/{pid}/stdin", operation_id="send_stdin", status_code=204)
async def send_stdin(
    sandbox_id: str, pid: int, request: Request, processes: ProcessesDep
) -> Response:
    data = await request.body()
    await processes.send_stdin(sandbox_id, pid, data)
    return Response(status_code=204)


@router.post("/processes/{pid}/close-stdin", operation_id="close_stdin", status_code=204)
async def close_stdin(sandbox_id: str, pid: int, processes: ProcessesDep) -> Response:
    await processes.close_stdin(sandbox_id, pid)
    return Response(status_code=204)


@router.post("/processes/{pid}/signal", operation_id="signal_process", status_code=204)
async def signal_process(
    sandbox_id: str, pid: int, body: schemas.SignalRequest, processes: ProcessesDep
) -> Response:
    await processes.signal(sandbox_id, pid, body.signal)
    return Response(status_code=204)


@router.post(
    "/pty", operation_id="open_pty", status_code=201, response_model=schemas.ProcessStarted
)
async def open_pty(
    sandbox_id: str, body: schemas.PtyRequest, processes: ProcessesDep
) -> schemas.ProcessStarted:
    """Start a command (default: the login shell) on a new terminal; its output is the
    process's events, its input the process's stdin."""
    spec = ExecSpec(
        cmd=body.cmd,
        env=body.env,
        cwd=body.cwd,
        user=body.user,
        tag=body.tag,
        pty=PtySize(body.rows, body.cols),
    )
    return schemas.ProcessStarted(pid=await processes.start_pty(sandbox_id, spec))


@router.post("/processes/{pid}/resize", operation_id="resize_pty", status_code=204)
async def resize_pty(
    sandbox_id: str, pid: int, body: schemas.ResizeRequest, processes: ProcessesDep
) -> Response:
    await processes.resize(sandbox_id, pid, body.rows, body.cols)
    return Response(status_code=204)
