"""``GET /metrics``: Prometheus text for admin keys (``api/metrics.py`` says what is in it)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response

from corral.api.deps import MetricsDep
from corral.api.metrics import CONTENT_TYPE, ApiMetrics

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    operation_id="get_metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
)
async def get_metrics(request: Request, sandbox_metrics: MetricsDep) -> Response:
    metrics: ApiMetrics = request.app.state.metrics
    network = await sandbox_metrics.network_totals()
    body = await asyncio.to_thread(metrics.render, network)  # reads the store
    return Response(body, media_type=CONTENT_TYPE)
