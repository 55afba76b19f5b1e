"""One sandbox's resource use now (cpu, memory, disk, network), sampled on demand
(``service/metrics.py``); the console plots it by asking every few seconds."""

from __future__ import annotations

from fastapi import APIRouter

from corral.api import schemas
from corral.api.deps import MetricsDep

router = APIRouter(prefix="/v1/sandboxes/{sandbox_id}", tags=["sandboxes"])


@router.get("/metrics", operation_id="sandbox_metrics", response_model=schemas.SandboxMetricsSample)
async def sandbox_metrics(sandbox_id: str, metrics: MetricsDep) -> schemas.SandboxMetricsSample:
    """cpu percent of its allowance since the previous sample, memory and disk in bytes, network
    traffic in bytes and packets since the sandbox was created; 409
    when the sandbox is not running."""
    sample = await metrics.sample(sandbox_id)
    return schemas.SandboxMetricsSample(
        sandbox_id=sample.sandbox_id,
        timestamp=sample.timestamp,
        cpu_count=sample.cpu_count,
        cpu_used_pct=sample.cpu_used_pct,
        mem_used=sample.mem_used,
        mem_total=sample.mem_total,
        mem_cache=sample.mem_cache,
        disk_used=sample.disk_used,
        disk_total=sample.disk_total,
        net_rx_bytes=sample.net_rx_bytes,
        net_rx_packets=sample.net_rx_packets,
        net_tx_bytes=sample.net_tx_bytes,
        net_tx_packets=sample.net_tx_packets,
    )
