"""Workspace-wide resources: capacity and templates."""

from fastapi import APIRouter

from corral.api import schemas
from corral.api.deps import SandboxesDep, WorkspaceDep

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


@router.get("/templates", operation_id="list_templates", response_model=schemas.TemplateList)
async def list_templates(ws: WorkspaceDep) -> schemas.TemplateList:
    return schemas.TemplateList(
        templates=[
            schemas.Template(
                name=t.name,
                image=t.image,
                cpu=t.cpu,
                memory_mib=t.memory_mib,
                disk_mib=t.disk_mib,
                created_at=t.created_at,
            )
            for t in ws.templates.list()
        ]
    )
