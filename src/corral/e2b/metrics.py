"""E2B's sandbox metrics routes over corral's ``MetricsService``.

corral samples a sandbox when asked and keeps no history, so ``GET /sandboxes/{id}/metrics``
answers one sample (now) whatever ``start`` and ``end`` say, and ``GET /sandboxes/metrics`` one
per running sandbox asked for. A parked sandbox answers an empty list, as E2B's does for a
paused one.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from corral.e2b.bodies import iso
from corral.e2b.deps import MetricsDep, SandboxesDep
from corral.e2b.rest import find, guarded, require_api_key
from corral.service.errors import InvalidRequest
from corral.service.metrics import SandboxMetrics
from corral.service.model import SandboxState

router = APIRouter(tags=["e2b"], dependencies=[Depends(require_api_key)], include_in_schema=False)
MAX_IDS = 100


def metric_body(sample: SandboxMetrics) -> dict[str, Any]:
    return {
        "timestamp": iso(sample.timestamp),
        "timestampUnix": int(sample.timestamp),
        "cpuCount": max(1, round(sample.cpu_count)),
        "cpuUsedPct": sample.cpu_used_pct,
        "memUsed": sample.mem_used,
        "memTotal": sample.mem_total,
        "memCache": sample.mem_cache,
        "diskUsed": sample.disk_used,
        "diskTotal": sample.disk_total,
    }


@router.get("/sandboxes/metrics")
async def metrics_of_many(
    request: Request, sandboxes: SandboxesDep, metrics: MetricsDep
) -> Response:
    async def run() -> Response:
        ids = [i for raw in request.query_params.getlist("sandbox_ids") for i in raw.split(",")]
        ids = [i for i in ids if i]
        if len(ids) > MAX_IDS:
            raise InvalidRequest(f"ask for at most {MAX_IDS} sandboxes at once")
        found: dict[str, Any] = {}
        for sandbox_id in ids:
            if find(sandboxes, sandbox_id).state == SandboxState.RUNNING:
                found[sandbox_id] = metric_body(await metrics.sample(sandbox_id))
        return JSONResponse({"sandboxes": found})

    return await guarded(run)


@router.get("/sandboxes/{sandbox_id}/metrics")
async def metrics_of_one(sandbox_id: str, sandboxes: SandboxesDep, metrics: MetricsDep) -> Response:
    async def run() -> Response:
        if find(sandboxes, sandbox_id).state != SandboxState.RUNNING:
            return JSONResponse([])
        return JSONResponse([metric_body(await metrics.sample(sandbox_id))])

    return await guarded(run)
