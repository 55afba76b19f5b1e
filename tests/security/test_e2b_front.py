"""Attacks on the E2B front: each performs the attack against the real app (unit harness, the
agents as host processes) and checks that it fails.

- a sandbox's access token opens only that sandbox (not another one, not by forging corral's
  internal ``x-corral-*`` headers);
- a signed file URL opens only its path, operation, sandbox and time;
- the control API takes no request without a valid corral key.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
import pytest

from corral.api.app import create_app
from corral.e2b.tokens import AccessTokens
from tests.unit.conftest import Harness, harness  # noqa: F401 (the fixture)


@pytest.fixture
async def client(harness: Harness) -> AsyncIterator[httpx.AsyncClient]:  # noqa: F811
    app = create_app(harness.workspace, manage_lifespan=False)
    key = harness.settings.admin_key_path.read_text().strip()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://corral",
        headers={"X-API-KEY": key},
    ) as c:
        yield c


async def new_sandbox(client: httpx.AsyncClient) -> tuple[str, str]:
    created = await client.post("/v2/sandboxes", json={"templateID": "base", "timeout": 60})
    assert created.status_code == 201, created.text
    body = created.json()
    return body["sandboxID"], body["envdAccessToken"]


async def pids(client: httpx.AsyncClient, headers: dict[str, str]) -> set[int] | int:
    answer = await client.post("/process.Process/List", headers=headers, json={})
    if answer.status_code != 200:
        return answer.status_code
    return {p["pid"] for p in answer.json().get("processes", [])}


async def test_a_token_opens_only_its_own_sandbox(client: httpx.AsyncClient) -> None:
    a_id, a_token = await new_sandbox(client)
    b_id, b_token = await new_sandbox(client)
    started = await client.post(
        f"/v1/sandboxes/{b_id}/exec",
        headers={"Authorization": f"Bearer {client.headers['X-API-KEY']}"},
        json={"cmd": ["sleep", "30"], "background": True},
    )
    b_pid = started.json()["pid"]
    listed = await pids(client, {"E2b-Sandbox-Id": b_id, "X-Access-Token": b_token})
    assert isinstance(listed, set) and b_pid in listed
    # A's token for B's id.
    assert await pids(client, {"E2b-Sandbox-Id": b_id, "X-Access-Token": a_token}) == 401
    # No token, an empty one, B's id in the host name with A's token.
    assert await pids(client, {"E2b-Sandbox-Id": b_id}) == 401
    assert await pids(client, {"E2b-Sandbox-Id": b_id, "X-Access-Token": ""}) == 401
    host = {"Host": f"49983-{b_id}.corral.test", "X-Access-Token": a_token}
    assert await pids(client, host) == 401
    # A's own id and token, plus forged internal headers naming B: they are replaced.
    forged = {
        "E2b-Sandbox-Id": a_id,
        "X-Access-Token": a_token,
        "X-Corral-Sandbox": b_id,
        "X-Corral-Token-Ok": "1",
    }
    listed = await pids(client, forged)
    assert isinstance(listed, set) and b_pid not in listed
    # Forged "token ok" on /files without any token.
    read = await client.get(
        "/files",
        params={"path": "/etc/hostname"},
        headers={"E2b-Sandbox-Id": b_id, "X-Corral-Token-Ok": "1", "X-Corral-Sandbox": b_id},
    )
    assert read.status_code == 401


async def test_signed_urls_open_only_what_they_sign(
    client: httpx.AsyncClient,
    harness: Harness,  # noqa: F811
) -> None:
    a_id, _ = await new_sandbox(client)
    b_id, _ = await new_sandbox(client)
    tokens: AccessTokens = AccessTokens((harness.settings.data_dir / "e2b.secret").read_bytes())
    no_key = {"X-API-KEY": ""}
    later = int(time.time()) + 60

    def signed(sandbox: str, path: str, op: str, expiration: int | None) -> dict[str, str]:
        params = {"path": path, "signature": tokens.signature(sandbox, path, op, "", expiration)}
        if expiration is not None:
            params["signature_expiration"] = str(expiration)
        return params

    ok = await client.get("/files", params=signed(a_id, "/etc/hostname", "read", later))
    assert ok.status_code == 200
    # Another path under the same signature.
    params = signed(a_id, "/etc/hostname", "read", later) | {"path": "/etc/shadow"}
    assert (await client.get("/files", params=params, headers=no_key)).status_code == 401
    # A read signature used to write.
    params = signed(a_id, "/tmp/x", "read", later)
    wrote = await client.post("/files", params=params, content=b"x", headers=no_key)
    assert wrote.status_code == 401
    # A's signature presented for B.
    params = signed(a_id, "/etc/hostname", "read", later)
    addressed = {"E2b-Sandbox-Id": b_id, **no_key}
    assert (await client.get("/files", params=params, headers=addressed)).status_code == 401
    # A longer life than signed, and an expired one.
    params = signed(a_id, "/etc/hostname", "read", later) | {"signature_expiration": str(later + 9)}
    assert (await client.get("/files", params=params)).status_code == 401
    expired = signed(a_id, "/etc/hostname", "read", int(time.time()) - 1)
    assert (await client.get("/files", params=expired)).status_code == 401


async def test_control_api_needs_a_valid_key(client: httpx.AsyncClient) -> None:
    for headers in ({"X-API-KEY": ""}, {"X-API-KEY": "e2b_" + "0" * 40}):
        for method, path in (("GET", "/v2/sandboxes"), ("POST", "/v2/sandboxes")):
            answer = await client.request(
                method, path, headers=headers, json={"templateID": "base"}
            )
            assert answer.status_code == 401, (method, path, answer.text)
    listed = await client.get(
        "/v1/sandboxes", headers={"Authorization": f"Bearer {client.headers['X-API-KEY']}"}
    )
    assert listed.json()["sandboxes"] == []


async def test_an_oversized_control_body_is_refused(client: httpx.AsyncClient) -> None:
    async def endless() -> AsyncIterator[bytes]:
        chunk = b" " * 65536
        for _ in range(64):  # 4 MiB, past the 1 MiB bound
            yield chunk

    answer = await client.post(
        "/v2/sandboxes", content=endless(), headers={"Content-Type": "application/json"}
    )
    # The daemon's body bound answers before the E2B front reads it: 413 naming the bound.
    assert answer.status_code == 413
    assert "at most 1 MiB" in answer.json()["message"]


async def test_a_viewer_key_cannot_change_or_open_sandboxes(
    client: httpx.AsyncClient,
    harness: Harness,  # noqa: F811
) -> None:
    sandbox_id, _ = await new_sandbox(client)
    viewer = {"X-API-KEY": harness.workspace.api_keys.create("looker", role="viewer")}
    answers = [
        await client.post("/v2/sandboxes", headers=viewer, json={"templateID": "base"}),
        await client.post(f"/v2/sandboxes/{sandbox_id}/connect", headers=viewer, json={}),
        await client.post(f"/sandboxes/{sandbox_id}/pause", headers=viewer),
        await client.post(f"/sandboxes/{sandbox_id}/fork", headers=viewer, json={}),
        await client.delete(f"/sandboxes/{sandbox_id}", headers=viewer),
    ]
    assert [a.status_code for a in answers] == [403] * 5
    seen = await client.get(f"/sandboxes/{sandbox_id}", headers=viewer)
    assert seen.status_code == 200 and "envdAccessToken" not in seen.json()
    listed = await client.get("/v2/sandboxes", headers=viewer)
    assert [s["sandboxID"] for s in listed.json()] == [sandbox_id]
    assert (await client.get(f"/sandboxes/{sandbox_id}")).json()["state"] == "running"


async def test_a_traffic_token_opens_only_its_own_sandboxs_ports(
    client: httpx.AsyncClient,
) -> None:
    """A sandbox's traffic token (or envd token) reaches its ports, never another sandbox's,
    never envd; the credentials are not passed on to the port."""
    created = await client.post("/v2/sandboxes", json={"templateID": "base", "timeout": 60})
    a_id, a_traffic = created.json()["sandboxID"], created.json()["trafficAccessToken"]
    b_id, b_token = await new_sandbox(client)
    port = {"E2b-Sandbox-Id": b_id, "E2b-Sandbox-Port": "8000"}
    for stolen in (
        {"E2B-Traffic-Access-Token": a_traffic},
        {"X-Access-Token": a_traffic},
        {"E2B-Traffic-Access-Token": b_token[:-1] + "0"},
    ):
        answer = await client.get("/", headers={**port, **stolen})
        assert answer.status_code == 401, answer.text
    # The traffic token is no envd token: envd stays closed to it.
    envd = {"E2b-Sandbox-Id": a_id, "X-Access-Token": a_traffic}
    assert await pids(client, envd) == 401
    with_traffic = {"E2b-Sandbox-Id": a_id, "E2B-Traffic-Access-Token": a_traffic}
    assert await pids(client, with_traffic) == 401


async def test_forwarding_strips_the_sandbox_credentials(client: httpx.AsyncClient) -> None:
    """What reaches the port: the request with its body and the app's own headers, without the
    sandbox's tokens or the routing headers (here the "sandbox port" is a loopback server, as
    the unit harness's sandboxes live on loopback)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Echo(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"] or 0))
            answer = json.dumps({"headers": dict(self.headers), "body": body.decode()}).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        created = await client.post("/v2/sandboxes", json={"templateID": "base", "timeout": 60})
        body = created.json()
        headers = {
            "E2b-Sandbox-Id": body["sandboxID"],
            "E2b-Sandbox-Port": str(server.server_address[1]),
            "E2B-Traffic-Access-Token": body["trafficAccessToken"],
            "X-Access-Token": body["envdAccessToken"],
            "Authorization": "Bearer the-apps-own",
            "X-Custom": "kept",
        }
        answer = await client.post("/echo?q=1", headers=headers, content=b"payload")
        assert answer.status_code == 200, answer.text
        seen = {k.lower(): v for k, v in answer.json()["headers"].items()}
        assert answer.json()["body"] == "payload"
        assert (seen["authorization"], seen["x-custom"]) == ("Bearer the-apps-own", "kept")
        for secret in ("x-access-token", "e2b-traffic-access-token", "e2b-sandbox-id", "x-api-key"):
            assert secret not in seen, secret
    finally:
        server.shutdown()
