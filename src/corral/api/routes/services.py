"""The project's services (admin only): names sandboxes in a project mode resolve."""

from __future__ import annotations

from fastapi import APIRouter, Response

from corral.api import schemas
from corral.api.deps import ProjectServicesDep
from corral.service.errors import InvalidRequest
from corral.service.records import ProjectServiceRecord

# Admin keys only: api/permissions.py (scope "services").
router = APIRouter(prefix="/v1/services", tags=["services"])


def service_schema(record: ProjectServiceRecord) -> schemas.ProjectService:
    return schemas.ProjectService(
        name=record.name,
        address=record.address,
        ports=record.ports,
        created_at=record.created_at,
        sandbox_id=record.sandbox_id,
    )


@router.get("", operation_id="list_services", response_model=schemas.ProjectServiceList)
async def list_services(services: ProjectServicesDep) -> schemas.ProjectServiceList:
    return schemas.ProjectServiceList(services=[service_schema(r) for r in services.list()])


@router.put("/{name}", operation_id="put_service", response_model=schemas.ProjectService)
async def put_service(
    name: str, body: schemas.ProjectServiceCreate, services: ProjectServicesDep
) -> schemas.ProjectService:
    if body.target is not None and body.sandbox_id is None and body.port is None:
        return service_schema(await services.add(name, body.target))
    if body.target is None and body.sandbox_id is not None and body.port is not None:
        return service_schema(await services.add_sandbox(name, body.sandbox_id, body.port))
    raise InvalidRequest(
        f"service {name!r}: give either target (IPV4:PORT) or sandbox_id and port, not both"
    )


@router.delete("/{name}", operation_id="remove_service", status_code=204)
async def remove_service(name: str, services: ProjectServicesDep) -> Response:
    await services.remove(name)
    return Response(status_code=204)
