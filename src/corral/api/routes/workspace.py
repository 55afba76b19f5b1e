"""Workspace-wide resources: capacity."""

from fastapi import APIRouter

from corral.api import schemas
from corral.api.deps import SandboxesDep

router = APIRouter(prefix="/v1", tags=["workspace"])


@router.get("/capacity", operation_id="get_capacity", response_model=schemas.Capacity)
async def get_capacity(sandboxes: SandboxesDep) -> schemas.Capacity:
    report = sandboxes.capacity()

    def usage(u: object) -> schemas.ResourceUsage:
        return schemas.ResourceUsage(
            total=u.total,  # type: ignore[attr-defined]
            reserved=u.reserved,  # type: ignore[attr-defined]
            free=u.free,  # type: ignore[attr-defined]
        )

    return schemas.Capacity(
        cpu=usage(report.cpu),
        memory=usage(report.memory),
        disk=usage(report.disk),
        cpu_overcommit=report.cpu_overcommit,
    )
