"""A sandbox's open ports: open (``POST``), list, close. The traffic itself goes through the
inbound proxy (``api/inbound/``), not through these routes."""

from __future__ import annotations

from fastapi import APIRouter, Response

from corral.api import schemas
from corral.api.deps import PortsDep
from corral.service.ports import OpenPort

router = APIRouter(prefix="/v1/sandboxes/{sandbox_id}/ports", tags=["ports"])


def port_schema(opened: OpenPort) -> schemas.Port:
    return schemas.Port(
        sandbox_id=opened.sandbox_id,
        port=opened.port,
        public=opened.public,
        url=opened.url,
        path_url=opened.path_url,
        host_url=opened.host_url,
        token=opened.token,
        created_at=opened.created_at,
    )


@router.get("", operation_id="list_ports", response_model=schemas.PortList)
async def list_ports(sandbox_id: str, ports: PortsDep) -> schemas.PortList:
    return schemas.PortList(ports=[port_schema(p) for p in ports.list(sandbox_id)])


@router.post("", operation_id="open_port", response_model=schemas.Port)
async def open_port(sandbox_id: str, body: schemas.PortOpen, ports: PortsDep) -> schemas.Port:
    return port_schema(ports.open(sandbox_id, body.port, public=body.public))


@router.delete("/{port}", operation_id="close_port", status_code=204)
async def close_port(sandbox_id: str, port: int, ports: PortsDep) -> Response:
    ports.close(sandbox_id, port)
    return Response(status_code=204)
