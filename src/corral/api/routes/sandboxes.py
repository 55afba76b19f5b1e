"""Sandboxes: create, list, get, kill."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import StreamingResponse

from corral.api import schemas
from corral.api.deps import (
    ApiKeysDep,
    CreatorDep,
    LifecycleDep,
    PortsDep,
    ProjectServicesDep,
    SandboxesDep,
    SecretsDep,
    SnapshotsDep,
    TransferDep,
)
from corral.api.routes.ports import port_schema
from corral.service.errors import InvalidRequest
from corral.service.model import CreateRequest
from corral.service.records import SandboxRecord
from corral.service.secrets import SecretService
from corral.timing import phase

router = APIRouter(prefix="/v1/sandboxes", tags=["sandboxes"])


def to_schema(record: SandboxRecord, owners: Mapping[str, str] | None = None) -> schemas.Sandbox:
    """``owners`` (key names by id) fills in ``owner``, where the caller looked them up."""
    return schemas.Sandbox(
        id=record.id,
        state=record.state,  # type: ignore[arg-type]
        template=record.template,
        cpu=record.cpu,
        memory_mib=record.memory_mib,
        disk_mib=record.disk_mib,
        env=record.env,
        metadata=record.metadata,
        created_at=record.created_at,
        expires_at=record.expires_at,
        error=record.error,
        secret_env_keys=record.secret_keys,
        on_timeout=record.on_timeout,
        auto_park_idle=record.auto_park_idle,
        auto_wake=record.auto_wake,
        parent_id=record.parent_id,
        image_mib=record.image_mib,
        pooled=record.pooled,
        network=network_of(record),
        owner=owners.get(record.owner) if owners and record.owner else None,
    )


def network_of(record: SandboxRecord) -> schemas.NetworkPolicy:
    if not record.network:
        return schemas.NetworkPolicy(mode="airgapped")
    return schemas.NetworkPolicy.model_validate_json(record.network)


@router.post("", operation_id="create_sandbox", status_code=201, response_model=schemas.Sandbox)
async def create_sandbox(
    body: schemas.SandboxCreate,
    creator: CreatorDep,
    snapshots: SnapshotsDep,
    secrets: SecretsDep,
) -> schemas.Sandbox:
    request = CreateRequest(
        template=body.template,
        cpu=body.cpu,
        memory_mib=body.memory_mib,
        disk_mib=body.disk_mib,
        env=body.env,
        metadata=body.metadata,
        ttl_seconds=body.ttl_seconds,
        secret_env=body.secret_env,
        on_timeout=body.on_timeout,
        auto_park_idle=body.auto_park_idle,
        auto_wake=body.auto_wake,
        network=body.network,
        allow=body.allow,
        deny=body.deny,
        secrets=body.secrets,
        secret_files={f.path: (f.name, f.template) for f in body.secret_files},
    )
    if body.snapshot is not None and (body.secrets or body.secret_files):
        raise InvalidRequest(
            "brokered secrets are given to new sandboxes, not to one restored from a snapshot"
        )
    if body.snapshot is not None:
        return with_secrets(to_schema(await snapshots.restore(body.snapshot, request)), secrets)
    record = await creator.create(request)
    with phase("sandbox answer"):
        return with_secrets(to_schema(record), secrets)


def with_secrets(answer: schemas.Sandbox, secrets: SecretService) -> schemas.Sandbox:
    """One sandbox's answer with the names of its brokered secrets (a store query, so lists,
    which may hold thousands, leave it out)."""
    answer.brokered_secrets = secrets.bindings_of(answer.id)
    return answer


@router.get("", operation_id="list_sandboxes", response_model=schemas.SandboxList)
async def list_sandboxes(
    sandboxes: SandboxesDep,
    api_keys: ApiKeysDep,
    state: Annotated[list[str] | None, Query()] = None,
    metadata: Annotated[list[str] | None, Query(description="k=v, repeatable")] = None,
    include_pooled: Annotated[
        bool, Query(description="also the ready sandboxes waiting in template pools")
    ] = False,
    include_ended: Annotated[
        bool,
        Query(
            alias="all",
            description="also the ended (killed, stopped) ones, until their records are pruned",
        ),
    ] = False,
) -> schemas.SandboxList:
    wanted: dict[str, str] = {}
    for item in metadata or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"metadata filter must be KEY=VALUE, got {item!r}")
        wanted[key] = value
    records = sandboxes.list(
        states=state,
        metadata=wanted or None,
        include_pooled=include_pooled,
        include_ended=include_ended,
    )
    owners = api_keys.names()
    return schemas.SandboxList(sandboxes=[to_schema(r, owners) for r in records])


@router.get("/{sandbox_id}", operation_id="get_sandbox", response_model=schemas.Sandbox)
async def get_sandbox(
    sandbox_id: str,
    sandboxes: SandboxesDep,
    api_keys: ApiKeysDep,
    project_services: ProjectServicesDep,
    ports: PortsDep,
    secrets: SecretsDep,
) -> schemas.Sandbox:
    record = await sandboxes.refresh(sandbox_id)
    answer = to_schema(record, api_keys.names())
    answer.frozen = sandboxes.freezer.is_frozen(sandbox_id)
    services = project_services.list()
    # Without tokens: reading a sandbox is a viewer's right, a port's token its owner's
    # (GET .../ports gives them).
    answer.ports = [
        port_schema(p).model_copy(update={"token": None}) for p in ports.list(sandbox_id)
    ]
    if sandboxes.policy_of(record).reaches_project:
        answer.names = [s.name for s in services if s.sandbox_id != sandbox_id]
    answer.serves_as = [s.name for s in services if s.sandbox_id == sandbox_id]
    return with_secrets(answer, secrets)


@router.delete("/{sandbox_id}", operation_id="kill_sandbox", status_code=204)
async def kill_sandbox(sandbox_id: str, sandboxes: SandboxesDep) -> Response:
    await sandboxes.kill(sandbox_id)
    return Response(status_code=204)


@router.post("/{sandbox_id}/park", operation_id="park_sandbox", response_model=schemas.Sandbox)
async def park_sandbox(sandbox_id: str, lifecycle: LifecycleDep) -> schemas.Sandbox:
    return to_schema(await lifecycle.park(sandbox_id))


@router.post("/{sandbox_id}/wake", operation_id="wake_sandbox", response_model=schemas.Sandbox)
async def wake_sandbox(sandbox_id: str, lifecycle: LifecycleDep) -> schemas.Sandbox:
    return to_schema(await lifecycle.wake(sandbox_id))


@router.post(
    "/{sandbox_id}/fork",
    operation_id="fork_sandbox",
    status_code=201,
    response_model=schemas.SandboxList,
)
async def fork_sandbox(
    sandbox_id: str, body: schemas.ForkRequest, lifecycle: LifecycleDep
) -> schemas.SandboxList:
    records = await lifecycle.fork(sandbox_id, body.count)
    return schemas.SandboxList(sandboxes=[to_schema(r) for r in records])


@router.get(
    "/{sandbox_id}/export",
    operation_id="export_sandbox",
    responses={200: {"content": {"application/x-tar": {}}}},
)
async def export_sandbox(sandbox_id: str, transfer: TransferDep) -> StreamingResponse:
    return StreamingResponse(transfer.export_sandbox(sandbox_id), media_type="application/x-tar")


@router.put(
    "/{sandbox_id}/network",
    operation_id="set_sandbox_network",
    response_model=schemas.NetworkChanged,
)
async def set_sandbox_network(
    sandbox_id: str, body: schemas.NetworkUpdate, sandboxes: SandboxesDep
) -> schemas.NetworkChanged:
    record, cut = await sandboxes.set_network(
        sandbox_id, mode=body.mode, allow=body.allow, deny=body.deny
    )
    return schemas.NetworkChanged(
        sandbox_id=record.id, network=network_of(record), connections_cut=cut
    )
