"""Inbound ports on the unit harness: open, list, close; tokens per port; credential checks."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from corral.service.errors import Forbidden, NotFound, Unauthorized
from tests.unit.conftest import Harness


async def test_open_list_close_and_tokens(harness: Harness, client: httpx.AsyncClient) -> None:
    sbx = (await client.post("/v1/sandboxes", json={})).json()
    path = f"/v1/sandboxes/{sbx['id']}/ports"
    opened = await client.post(path, json={"port": 8080})
    assert opened.status_code == 200, opened.text
    port = opened.json()
    assert port["path_url"].endswith(f"/sandboxes/{sbx['id']}/ports/8080/")
    assert port["public"] is False and len(port["token"]) == 64
    # Opening again keeps the token; public drops it from the answer.
    again = (await client.post(path, json={"port": 8080})).json()
    assert again["token"] == port["token"]
    other = (await client.post(path, json={"port": 9090, "public": True})).json()
    assert other["token"] is None
    listed = (await client.get(path)).json()["ports"]
    assert [(p["port"], p["public"]) for p in listed] == [(8080, False), (9090, True)]

    ports = harness.workspace.ports
    ports.check_access(sbx["id"], 8080, port["token"])
    ports.check_access(sbx["id"], 9090, None)
    with pytest.raises(Unauthorized):
        ports.check_access(sbx["id"], 8080, None)
    with pytest.raises(Forbidden):
        ports.check_access(sbx["id"], 8080, "f" * 64)
    with pytest.raises(NotFound):
        ports.check_access(sbx["id"], 7070, port["token"])

    assert (await client.delete(f"{path}/8080")).status_code == 204
    assert (await client.delete(f"{path}/8080")).status_code == 404
    reopened = (await client.post(path, json={"port": 8080})).json()
    assert reopened["token"] != port["token"]  # closing forgets the token
    for bad in ({"port": 0}, {"port": 65536}, {"port": 80, "extra": 1}):
        assert (await client.post(path, json=bad)).status_code == 422
    assert (await client.post("/v1/sandboxes/sb-nope/ports", json={"port": 1})).status_code == 404
    await client.delete(f"/v1/sandboxes/{sbx['id']}")
    with pytest.raises(NotFound):  # an ended sandbox's ports are not reachable
        ports.check_access(sbx["id"], 9090, None)
    assert (await client.get(path)).json()["ports"] == []


async def test_closing_a_port_cuts_the_connections_held_through_it(
    harness: Harness, client: httpx.AsyncClient
) -> None:
    sbx = (await client.post("/v1/sandboxes", json={})).json()
    path = f"/v1/sandboxes/{sbx['id']}/ports"
    for port in (8080, 9090):
        assert (await client.post(path, json={"port": port})).status_code == 200
    ports = harness.workspace.ports
    entered = {8080: asyncio.Event(), 9090: asyncio.Event()}

    async def hold(port: int) -> None:  # what the inbound proxy does for one connection
        with ports.connection(sbx["id"], port):
            entered[port].set()
            await asyncio.Event().wait()

    held = {port: asyncio.create_task(hold(port)) for port in entered}
    for event in entered.values():
        await event.wait()
    assert (await client.delete(f"{path}/8080")).status_code == 204
    with pytest.raises(asyncio.CancelledError):
        await held[8080]
    assert not held[9090].done()  # the other port's connection goes on
    held[9090].cancel()
    with pytest.raises(asyncio.CancelledError):
        await held[9090]
