"""Prometheus metrics of one daemon, with the official client library, in a registry of its own
(so that several apps in one process, as in tests, never share counters).

Served at ``GET /metrics`` (admin keys, scope ``metrics``) in the text exposition format:

- ``corral_capacity_cpu``, ``corral_capacity_memory_mib``, ``corral_capacity_disk_mib``
  (label ``kind``: total, reserved, free) and ``corral_cpu_overcommit``: the workspace's capacity
  and its use, read when scraped;
- ``corral_sandboxes`` (label ``state``): sandboxes by state (pooled ones as ``pooled``);
- ``corral_request_duration_seconds`` (label ``operation``, a route's operation id): a histogram
  of answer latencies, so quantiles of every operation (create, exec, fork, ...) can be read;
- ``corral_requests_total`` (labels ``operation``, ``status``) and ``corral_errors_total``
  (label ``code``, the error codes of ``corral.errcodes``);
- ``corral_events_published_total``, ``corral_audit_dropped_total``, ``corral_api_keys``;
- ``corral_network_bytes`` and ``corral_network_packets`` (label ``direction``: rx, tx): the
  network traffic of the sandboxes running or parked now, summed (each since it was created,
  without the control channel: ``service/traffic.py``); a gauge, as it drops when one goes.
  Workspace totals only: per-sandbox figures are in ``GET /v1/sandboxes/{id}/metrics``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from corral.service.model import SandboxState
from corral.service.traffic import Traffic
from corral.service.workspace import Workspace

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STATES = tuple(SandboxState)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)


class WorkspaceCollector(Collector):
    """Gauges read from the workspace at scrape time (nothing to keep in step). ``network`` is
    set by the scrape just before it renders (reading live slots is async)."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.network = Traffic()

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        report = self.ws.admission.capacity()
        for name, usage, unit in (
            ("cpu", report.cpu, "vCPUs"),
            ("memory_mib", report.memory, "MiB"),
            ("disk_mib", report.disk, "MiB"),
        ):
            family = GaugeMetricFamily(
                f"corral_capacity_{name}", f"Workspace {name} in {unit}", labels=["kind"]
            )
            family.add_metric(["total"], usage.total)
            family.add_metric(["reserved"], usage.reserved)
            family.add_metric(["free"], usage.free)
            yield family
        yield GaugeMetricFamily(
            "corral_cpu_overcommit", "vCPUs handed out per host CPU", value=report.cpu_overcommit
        )
        counts = self.ws.metrics.sandbox_counts()
        family = GaugeMetricFamily("corral_sandboxes", "Sandboxes by state", labels=["state"])
        for state in (*STATES, "pooled"):
            family.add_metric([state], counts.get(state, 0))
        yield family
        yield GaugeMetricFamily(
            "corral_api_keys", "API keys that are not revoked", value=len(self.ws.api_keys.list())
        )
        yield CounterMetricFamily(
            "corral_events_published", "Events published", value=self.ws.events.published
        )
        yield CounterMetricFamily(
            "corral_audit_dropped",
            "Audit entries dropped (writer behind)",
            value=self.ws.audit.dropped,
        )
        for unit, rx, tx in (
            ("bytes", self.network.rx_bytes, self.network.tx_bytes),
            ("packets", self.network.rx_packets, self.network.tx_packets),
        ):
            family = GaugeMetricFamily(
                f"corral_network_{unit}",
                f"Network {unit} of the running and parked sandboxes since each was created",
                labels=["direction"],
            )
            family.add_metric(["rx"], rx)
            family.add_metric(["tx"], tx)
            yield family


class ApiMetrics:
    """The registry of one app: request latencies and errors, plus the workspace's gauges."""

    def __init__(self, ws: Workspace) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.latency = Histogram(
            "corral_request_duration_seconds",
            "Latency of API answers by operation",
            ["operation"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            "corral_requests",
            "API requests by operation and status",
            ["operation", "status"],
            registry=self.registry,
        )
        self.errors = Counter(
            "corral_errors", "Error answers by code", ["code"], registry=self.registry
        )
        self.workspace = WorkspaceCollector(ws)
        self.registry.register(self.workspace)

    def observe(self, operation: str, status: int, seconds: float) -> None:
        self.latency.labels(operation).observe(seconds)
        self.requests.labels(operation, str(status)).inc()

    def error(self, code: str) -> None:
        self.errors.labels(code).inc()

    def render(self, network: Traffic | None = None) -> bytes:
        """The exposition text; ``network``: the sandboxes' traffic totals read just before."""
        if network is not None:
            self.workspace.network = network
        return generate_latest(self.registry)
