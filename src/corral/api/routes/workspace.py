"""Workspace-wide resources: capacity."""

from fastapi import APIRouter

from corral.api import schemas
from corral.api.deps import AdmissionDep
from corral.service.capacity import Usage

router = APIRouter(prefix="/v1", tags=["workspace"])


@router.get("/capacity", operation_id="get_capacity", response_model=schemas.Capacity)
async def get_capacity(admission: AdmissionDep) -> schemas.Capacity:
    report = admission.capacity()

    def usage(u: Usage) -> schemas.ResourceUsage:
        return schemas.ResourceUsage(total=u.total, reserved=u.reserved, free=u.free)

    return schemas.Capacity(
        cpu=usage(report.cpu),
        memory=usage(report.memory),
        disk=usage(report.disk),
        cpu_overcommit=report.cpu_overcommit,
    )
