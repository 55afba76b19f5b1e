"""Templates: uploads for builds, build (an NDJSON stream of build events), list, get, delete,
build logs."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse

from corral.api import schemas, schemas_access
from corral.api.deps import BuildsDep, PoolsDep, TemplatesDep
from corral.api.streams import NDJSON, ndjson_response
from corral.service.builds import BuildRequest
from corral.service.records import BuildStep, TemplateRecord
from corral.service.templates import TemplateService

router = APIRouter(prefix="/v1/templates", tags=["templates"])


def to_schema(record: TemplateRecord, templates: TemplateService) -> schemas.Template:
    manifest = templates.store.get_image(record.image) if record.image.startswith("sha") else None
    layers = list(manifest.layers) if manifest else [f"prebuilt:{record.image}"]
    return schemas.Template(
        name=record.name,
        image=record.image,
        cpu=record.cpu,
        memory_mib=record.memory_mib,
        disk_mib=record.disk_mib,
        created_at=record.created_at,
        source=record.source,
        env=record.env,
        workdir=record.workdir,
        user=record.user,
        start_cmd=record.start_cmd,
        max_cpu=record.max_cpu,
        max_memory_mib=record.max_memory_mib,
        max_disk_mib=record.max_disk_mib,
        warmup=record.warmup,
        warm=record.warm,
        pool=record.pool,
        warm_ready=bool(record.warm_image),
        pool_ready=templates.pooled_count(record.name),
        labels=record.labels,
        layers=layers,
        used_by=templates.visible_users(record.name),
        shared=record.shared,
    )


@router.post(
    "/uploads",
    operation_id="upload_build_input",
    response_model=schemas.Upload,
    openapi_extra={
        "requestBody": {"content": {"application/x-tar": {}}, "description": "a tar stream"}
    },
)
async def upload_build_input(
    request: Request,
    templates: TemplatesDep,
    kind: Literal["context", "docker-archive", "oci"] = "context",
    name: str | None = None,
) -> schemas.Upload:
    """Receive a build context (a tar of its files), an OCI layout (a tar of the dir) or a
    docker-archive file; bounded by the daemon's upload limit. Name it in one build."""
    upload = await templates.uploads.receive(kind, name, request.stream())
    return schemas.Upload(id=upload.id, kind=upload.kind, size=upload.size, members=upload.members)  # type: ignore[arg-type]


@router.post(
    "",
    operation_id="build_template",
    responses={200: {"content": {NDJSON: {}}, "description": "build events, done or failed last"}},
)
async def build_template(body: schemas.TemplateBuild, builds: BuildsDep) -> Response:
    handle = await builds.start_build(
        BuildRequest(
            body.name,
            base=body.base,
            steps=[BuildStep(s.kind, s.value) for s in body.steps],
            dockerfile=body.dockerfile,
            context=body.context,
            context_dir=body.context_dir,
            build_args=body.build_args,
            creds=body.creds,
            insecure=body.insecure,
            cpu=body.cpu,
            memory_mib=body.memory_mib,
            disk_mib=body.disk_mib,
            max_cpu=body.max_cpu,
            max_memory_mib=body.max_memory_mib,
            max_disk_mib=body.max_disk_mib,
            start_cmd=body.start_cmd,
            warmup=body.warmup,
            warm=body.warm,
            pool=body.pool,
            tags=body.tags,
            step_timeout=body.step_timeout,
            build_disk_mib=body.build_disk_mib,
            network=body.network,
            recipes=body.recipes,
            shared=body.shared,
        )
    )
    return ndjson_response(handle.events())


@router.get("", operation_id="list_templates", response_model=schemas.TemplateList)
async def list_templates(templates: TemplatesDep) -> schemas.TemplateList:
    return schemas.TemplateList(templates=[to_schema(t, templates) for t in templates.list()])


@router.get("/{name}", operation_id="get_template", response_model=schemas.Template)
async def get_template(name: str, templates: TemplatesDep) -> schemas.Template:
    return to_schema(templates.get(name), templates)


@router.delete("/{name}", operation_id="delete_template", status_code=204)
async def delete_template(name: str, templates: TemplatesDep, pools: PoolsDep) -> Response:
    await pools.drain(templates.owned(name).name)  # its ready sandboxes are not users
    await templates.delete(name)
    return Response(status_code=204)


@router.put("/{name}/shared", operation_id="share_template", response_model=schemas.Template)
async def share_template(
    name: str, body: schemas_access.TemplateShare, templates: TemplatesDep
) -> schemas.Template:
    """Mark a template shared with every member (``shared: false``: private to its owner)."""
    return to_schema(templates.set_shared(name, body.shared), templates)


@router.get(
    "/{name}/logs",
    operation_id="template_logs",
    responses={200: {"content": {NDJSON: {}}, "description": "the last build's events"}},
)
async def template_logs(name: str, builds: BuildsDep) -> Response:
    return FileResponse(builds.logs(name), media_type=NDJSON)
