"""The networking API on the unit harness: policy on create, PUT /network, /v1/services."""

from __future__ import annotations

import httpx

from tests.unit.conftest import Harness


async def test_policy_on_create_and_live_replace(client: httpx.AsyncClient) -> None:
    created = await client.post(
        "/v1/sandboxes", json={"network": "internet", "deny": ["192.0.2.0/24"]}
    )
    assert created.status_code == 201, created.text
    sbx = created.json()
    assert sbx["network"] == {"mode": "internet", "allow": [], "deny": ["192.0.2.0/24"]}

    changed = await client.put(
        f"/v1/sandboxes/{sbx['id']}/network", json={"mode": "airgapped", "allow": ["project"]}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["network"] == {
        "mode": "airgapped",
        "allow": ["project"],
        "deny": ["192.0.2.0/24"],  # not given: kept
    }
    bad = await client.put(f"/v1/sandboxes/{sbx['id']}/network", json={"allow": ["nope nope"]})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid"
    unknown = await client.put(f"/v1/sandboxes/{sbx['id']}/network", json={"mode": "all"})
    assert unknown.status_code == 422
    got = await client.get(f"/v1/sandboxes/{sbx['id']}")
    assert got.json()["network"]["mode"] == "airgapped"
    await client.delete(f"/v1/sandboxes/{sbx['id']}")


async def test_services_are_listed_replaced_and_removed(client: httpx.AsyncClient) -> None:
    put = await client.put("/v1/services/db.project", json={"target": "10.1.2.3:5432"})
    assert put.status_code == 200, put.text
    put = await client.put("/v1/services/db.project", json={"target": "10.1.2.4:5433"})
    listed = (await client.get("/v1/services")).json()["services"]
    assert [(s["name"], s["address"], s["ports"]) for s in listed] == [
        ("db.project", "10.1.2.4", [5433])
    ]
    for target in ("127.0.0.1:80", "169.254.169.254:80", "10.1.2.3", "host:80"):
        refused = await client.put("/v1/services/x.project", json={"target": target})
        assert refused.status_code == 400, target
    assert (await client.delete("/v1/services/db.project")).status_code == 204
    assert (await client.delete("/v1/services/db.project")).status_code == 404


async def test_services_need_an_admin_key(harness: Harness, client: httpx.AsyncClient) -> None:
    key = harness.workspace.api_keys.create("agent", role="member")
    headers = {"Authorization": f"Bearer {key}"}
    for method, path, body in (
        ("GET", "/v1/services", None),
        ("PUT", "/v1/services/db.project", {"target": "10.1.2.3:5432"}),
        ("DELETE", "/v1/services/db.project", None),
    ):
        answer = await client.request(method, path, json=body, headers=headers)
        assert answer.status_code == 403 and answer.json()["code"] == "forbidden", path
    assert (await client.get("/v1/services")).json()["services"] == []
