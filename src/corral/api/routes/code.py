"""The code interpreter of a sandbox: executions (an NDJSON stream of E2B's events) and contexts."""

from __future__ import annotations

from fastapi import APIRouter, Response

from corral.api import schemas
from corral.api.deps import CodeDep
from corral.api.streams import NDJSON, ndjson_response

router = APIRouter(prefix="/v1/sandboxes/{sandbox_id}/code", tags=["code"])


@router.post(
    "/execute",
    operation_id="execute_code",
    responses={
        200: {
            "content": {NDJSON: {}},
            "description": "events: stdout, stderr, result, error, number_of_executions, "
            "end_of_execution (E2B's code-interpreter protocol)",
        }
    },
)
async def execute_code(sandbox_id: str, body: schemas.CodeExecution, code: CodeDep) -> Response:
    events = await code.execute(sandbox_id, body.model_dump(exclude_none=True))
    return ndjson_response(events)


@router.post("/contexts", operation_id="create_code_context", response_model=schemas.CodeContext)
async def create_code_context(
    sandbox_id: str, body: schemas.CodeContextCreate, code: CodeDep
) -> schemas.CodeContext:
    made = await code.create_context(sandbox_id, body.language, body.cwd)
    return schemas.CodeContext(**made)


@router.get("/contexts", operation_id="list_code_contexts", response_model=schemas.CodeContextList)
async def list_code_contexts(sandbox_id: str, code: CodeDep) -> schemas.CodeContextList:
    found = await code.list_contexts(sandbox_id)
    return schemas.CodeContextList(contexts=[schemas.CodeContext(**c) for c in found])


@router.post("/contexts/{context_id}/restart", operation_id="restart_code_context", status_code=204)
async def restart_code_context(sandbox_id: str, context_id: str, code: CodeDep) -> Response:
    await code.restart_context(sandbox_id, context_id)
    return Response(status_code=204)


@router.delete("/contexts/{context_id}", operation_id="remove_code_context", status_code=204)
async def remove_code_context(sandbox_id: str, context_id: str, code: CodeDep) -> Response:
    await code.remove_context(sandbox_id, context_id)
    return Response(status_code=204)
