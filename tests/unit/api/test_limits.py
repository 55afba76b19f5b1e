"""Request body bounds on the unit harness: refused with 413 ``too_large`` naming the bound."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from tests.unit.conftest import Harness

MiB = 1024 * 1024


async def test_a_json_body_over_the_bound_is_413_before_anything_runs(
    client: httpx.AsyncClient, harness: Harness
) -> None:
    body = b'{"metadata": {"k": "' + b"v" * (2 * MiB) + b'"}}'
    response = await client.post(
        "/v1/sandboxes", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json() == {
        "code": "too_large",
        "message": f"a request body (JSON) may be at most 1 MiB (it declares {len(body)} bytes); "
        "send less, or in several requests",
    }
    assert harness.workspace.db.sandboxes.list() == []


async def test_a_streamed_json_body_is_cut_off_at_the_bound(client: httpx.AsyncClient) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b'{"metadata": {"k": "'
        for _ in range(3):
            yield b"v" * MiB
        yield b'"}}'

    response = await client.post(
        "/v1/sandboxes", content=body(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413 and "more arrived" in response.json()["message"]


async def test_a_body_under_the_bound_is_handed_on_whole(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/sandboxes", json={"metadata": {"k": "v" * 1000}})
    assert response.status_code == 201
    assert response.json()["metadata"] == {"k": "v" * 1000}


async def test_an_import_over_its_cap_is_413_with_the_cap(
    client: httpx.AsyncClient, harness: Harness
) -> None:
    cap = harness.settings.max_import_mib or (
        harness.settings.max_memory_mib + harness.settings.max_disk_mib
    )
    response = await client.post(
        "/v1/import", content=b"", headers={"Content-Length": str((cap + 1) * MiB)}
    )
    assert response.status_code == 413
    message = response.json()["message"]
    assert message.startswith("an import upload may be at most") and "declares" in message


async def test_the_interactive_docs_need_the_key(client: httpx.AsyncClient) -> None:
    for page in ("/docs", "/redoc"):
        assert (await client.get(page, headers={"Authorization": ""})).status_code == 401
        assert (await client.get(page)).status_code == 200
