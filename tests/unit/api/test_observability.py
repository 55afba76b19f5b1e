"""The audit log, the event stream and the metrics, as their users see them: entries for
accepted and refused calls, append-only; events reaching the keys that may see them, through the
SDK's iterator; Prometheus text that parses and moves when sandboxes work."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import sqlalchemy
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from corral.cli.main import app
from corral.cli.top import render_table
from corral.network.base import Traffic
from corral.sdk import AsyncClient, Event
from tests.unit.conftest import Served


async def test_audit_records_accepted_and_refused_calls_and_is_append_only(
    served: Served,
) -> None:
    member = served.key("writer", "member")
    viewer = served.key("reader", "viewer")
    async with served.client(member) as m, served.client(viewer) as v:
        created = (await m.post("/v1/sandboxes", json={})).json()["id"]
        assert (await v.post("/v1/sandboxes", json={})).status_code == 403
        assert (await v.get(f"/v1/sandboxes/{created}")).status_code == 200  # reads: no entry
        assert (await m.delete(f"/v1/sandboxes/{created}")).status_code == 204
    async with served.client(None) as anonymous:
        assert (await anonymous.delete(f"/v1/sandboxes/{created}")).status_code == 401
    async with served.client(served.admin_key) as admin:
        everything = (await admin.get("/v1/audit")).json()["entries"]
        rows = [
            (e["key_name"], e["action"], e["target"], e["status"], e["result"]) for e in everything
        ]
        assert ("writer", "create_sandbox", created, 201, "ok") in rows
        assert ("reader", "create_sandbox", None, 403, "forbidden") in rows
        assert ("writer", "kill_sandbox", created, 204, "ok") in rows
        assert (None, "kill_sandbox", created, 401, "unauthorized") in rows
        assert not any(r[1] == "get_sandbox" for r in rows)
        assert all(e["source"] == "127.0.0.1" for e in everything)
        refused = next(e for e in everything if e["result"] == "forbidden")
        assert "role 'viewer'" in refused["detail"]
        by_sandbox = (await admin.get("/v1/audit", params={"sandbox": created})).json()
        assert {e["action"] for e in by_sandbox["entries"]} == {"create_sandbox", "kill_sandbox"}
        by_key = (await admin.get("/v1/audit", params={"key": "reader"})).json()["entries"]
        assert [e["action"] for e in by_key] == ["create_sandbox"]
        later = (await admin.get("/v1/audit", params={"since": everything[-1]["at"] + 1})).json()
        assert later["entries"] == []
        export = await admin.get("/v1/audit", params={"format": "jsonl"})
        assert export.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in export.text.splitlines()]
        assert [line["id"] for line in lines] == [e["id"] for e in everything[: len(lines)]]
    db = served.harness.workspace.db
    for statement in ("UPDATE audit_log SET result = 'ok'", "DELETE FROM audit_log"):
        with (
            pytest.raises(sqlalchemy.exc.IntegrityError, match="append-only"),
            db.engine.begin() as connection,
        ):
            connection.execute(sqlalchemy.text(statement))


async def collect(events: AsyncIterator[Event], sink: list[Event], done: asyncio.Event) -> None:
    async for event in events:
        sink.append(event)
        if event.kind == "killed":
            done.set()


async def test_events_reach_the_keys_that_may_see_them(served: Served) -> None:
    alice = served.key("alice", "member")
    bob = served.key("bob", "member")
    viewer = served.key("watcher", "viewer")
    clients = {name: AsyncClient(served.url, key) for name, key in
               (("alice", alice), ("bob", bob), ("viewer", viewer))}  # fmt: skip
    seen: dict[str, list[Event]] = {name: [] for name in clients}
    done = {name: asyncio.Event() for name in clients}
    tasks = [
        asyncio.create_task(collect(clients[name].events(), seen[name], done[name]))
        for name in clients
    ]
    try:
        # The streams are open once the daemon counts their subscribers.
        bus = served.harness.workspace.events
        while len(bus._subscribers) < len(clients):
            await asyncio.sleep(0.01)
        async with served.client(alice) as a, served.client(bob) as b:
            mine = (await a.post("/v1/sandboxes", json={})).json()["id"]
            await a.delete(f"/v1/sandboxes/{mine}")
            theirs = (await b.post("/v1/sandboxes", json={})).json()["id"]
            await b.delete(f"/v1/sandboxes/{theirs}")
        await asyncio.wait_for(done["alice"].wait(), 30)
        await asyncio.wait_for(done["bob"].wait(), 30)
        while sum(e.kind == "killed" for e in seen["viewer"]) < 2:
            await asyncio.sleep(0.01)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in clients.values():
            await client.aclose()
    assert [(e.kind, e.sandbox_id) for e in seen["alice"]] == [
        ("created", mine),
        ("running", mine),
        ("killed", mine),
    ]
    assert {e.sandbox_id for e in seen["bob"]} == {theirs}  # never alice's
    assert {e.sandbox_id for e in seen["viewer"]} == {mine, theirs}
    assert all(e.template == "base" and e.id > 0 for e in seen["viewer"])


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_metrics_parse_and_move_when_sandboxes_work(served: Served) -> None:
    member = served.key("m", "member")
    async with served.client(served.admin_key) as admin, served.client(member) as m:
        refused = await m.get("/metrics")
        assert refused.status_code == 403
        before = samples((await admin.get("/metrics")).text)
        created = await m.post("/v1/sandboxes", json={"memory_mib": 256})
        assert created.status_code == 201
        async with m.stream(
            "POST", f"/v1/sandboxes/{created.json()['id']}/exec", json={"cmd": ["true"]}
        ) as response:
            await response.aread()
        answer = await admin.get("/metrics")
        assert answer.headers["content-type"].startswith("text/plain")
        after = samples(answer.text)
    running = ("corral_sandboxes", (("state", "running"),))
    assert after[running] == before[running] + 1
    reserved = ("corral_capacity_memory_mib", (("kind", "reserved"),))
    assert after[reserved] == before[reserved] + 256
    creates = ("corral_request_duration_seconds_count", (("operation", "create_sandbox"),))
    assert after[creates] == before.get(creates, 0) + 1
    execs = ("corral_request_duration_seconds_count", (("operation", "exec_command"),))
    assert after[execs] >= 1
    forbidden = ("corral_errors_total", (("code", "forbidden"),))
    assert after[forbidden] >= 1
    assert after[("corral_api_keys", ())] == 2
    for unit in ("bytes", "packets"):
        for direction in ("rx", "tx"):
            assert (f"corral_network_{unit}", (("direction", direction),)) in after


async def test_network_totals_in_metrics_the_sdk_and_corral_top(served: Served) -> None:
    network = served.harness.network
    async with AsyncClient(served.url, served.admin_key) as sdk:
        sbx = await sdk.create_sandbox()
        slot = served.harness.workspace.sandboxes.live.slot(sbx.id)
        assert slot is not None and (await sbx.metrics()).net_rx_bytes == 0
        network.counted[slot.index] = Traffic(3 * 1024 * 1024, 2200, 4096, 40)
        sample = await sbx.metrics()
        assert (sample.net_rx_bytes, sample.net_rx_packets) == (3 * 1024 * 1024, 2200)
        assert (sample.net_tx_bytes, sample.net_tx_packets) == (4096, 40)
        text = await sdk.metrics_text()
    gauges = samples(text)
    assert gauges[("corral_network_bytes", (("direction", "rx"),))] >= 3 * 1024 * 1024
    assert gauges[("corral_network_packets", (("direction", "tx"),))] >= 40
    argv = ["--url", served.url, "--api-key", served.admin_key, "top", "--once"]
    result = await asyncio.to_thread(CliRunner().invoke, app, argv, catch_exceptions=False)
    header, row = result.stdout.splitlines()[:2]
    assert header.split()[-2:] == ["RX", "TX"]
    assert row.split()[-2:] == ["3.0M", "4.0K"]


def test_top_shows_rates_from_the_second_refresh() -> None:
    before = {"sandbox_id": "s1", "at": 10.0, "net_rx_bytes": 0, "net_tx_bytes": 100}
    now = before | {"at": 12.0, "net_rx_bytes": 2 * 1024 * 1024, "net_tx_bytes": 100}
    row = now | {
        "template": "base",
        "cpu_used_pct": 1.0,
        "memory_used_mib": 10.0,
        "memory_total_mib": 256,
        "disk_used_mib": 1.0,
        "disk_total_mib": 512,
    }
    line = render_table([row], {"s1": before}).splitlines()[1]
    assert line.split()[-4:] == ["2.0M", "1.0M/s", "100B", "0B/s"]


async def test_sandbox_metrics_through_the_sdk_and_corral_top(served: Served) -> None:
    member = served.key("m", "member")
    other = served.key("o", "member")
    async with AsyncClient(served.url, member) as sdk:
        sbx = await sdk.create_sandbox()
        sample = await sbx.metrics()
        assert sample.sandbox_id == sbx.id and sample.memory_total_mib == 256
        assert sample.memory_used_mib > 0 and 0 <= sample.cpu_used_pct <= 100
    async with served.client(other) as o:
        hidden = await o.get(f"/v1/sandboxes/{sbx.id}/metrics")
        assert hidden.status_code == 404
    runner = CliRunner()
    argv = ["--url", served.url, "--api-key", member, "top", "--json"]
    result = await asyncio.to_thread(runner.invoke, app, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["sandbox_id"], r["template"]) for r in rows] == [(sbx.id, "base")]
    argv = ["--url", served.url, "--api-key", other, "top", "--once"]
    result = await asyncio.to_thread(runner.invoke, app, argv, catch_exceptions=False)
    assert result.exit_code == 0 and sbx.id not in result.stdout and "CPU%" in result.stdout
