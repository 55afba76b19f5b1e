"""The HTTP edge on the unit harness: auth, status mapping, streaming, OpenAPI."""

from __future__ import annotations

import json

import httpx

from tests.unit.conftest import Harness


async def test_admin_key_file_and_hashing(harness: Harness) -> None:
    path = harness.settings.admin_key_path
    assert path.stat().st_mode & 0o777 == 0o600
    key = path.read_text().strip()
    assert harness.workspace.db.api_keys.find_by_hash(key) is None  # stored hashed only


async def test_unauthorized(client: httpx.AsyncClient) -> None:
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}):
        response = await client.get("/v1/capacity", headers=headers)
        assert response.status_code == 401
        assert response.json()["code"] == "unauthorized"
    assert (await client.get("/healthz", headers={"Authorization": ""})).status_code == 200
    assert (await client.get("/openapi.json", headers={"Authorization": ""})).status_code == 200


async def test_sandbox_roundtrip(client: httpx.AsyncClient) -> None:
    created = await client.post("/v1/sandboxes", json={"metadata": {"k": "v"}})
    assert created.status_code == 201, created.text
    sbx = created.json()["id"]
    async with client.stream(
        "POST", f"/v1/sandboxes/{sbx}/exec", json={"cmd": ["sh", "-c", "echo hi; exit 4"]}
    ) as response:
        assert response.headers["content-type"].startswith("application/x-ndjson")
        events = [json.loads(line) async for line in response.aiter_lines() if line]
    assert events[0]["type"] == "start"
    assert events[-1]["type"] == "exit" and events[-1]["exit_code"] == 4

    put = await client.put(
        f"/v1/sandboxes/{sbx}/files/content", params={"path": "/tmp/x/y"}, content=b"data"
    )
    assert put.status_code == 200, put.text
    got = await client.get(f"/v1/sandboxes/{sbx}/files/content", params={"path": "/tmp/x/y"})
    assert got.content == b"data"
    missing = await client.get(f"/v1/sandboxes/{sbx}/files/content", params={"path": "/nope"})
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"

    listed = await client.get("/v1/sandboxes", params={"metadata": "k=v"})
    assert [s["id"] for s in listed.json()["sandboxes"]] == [sbx]
    assert (await client.delete(f"/v1/sandboxes/{sbx}")).status_code == 204
    again = await client.post(f"/v1/sandboxes/{sbx}/exec", json={"cmd": ["true"]})
    assert again.status_code == 409 and "killed" in again.json()["message"]


async def test_validation_errors(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/sandboxes", json={"cpu": 0})
    assert response.status_code == 422
    assert response.json()["code"] == "invalid" and "cpu" in response.json()["message"]
    response = await client.post("/v1/sandboxes", json={"bogus": 1})
    assert response.status_code == 422
