"""The console's server side as a browser uses it: login link, session cookie, the /v1 API
through the session, the built page, and a terminal over a WebSocket (a real PTY on the host)."""

from __future__ import annotations

import json
import re

from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Origin

from tests.unit.console.conftest import Served


async def test_login_link_opens_an_httponly_strict_session_that_drives_the_api(
    served: Served,
) -> None:
    async with served.client(authorization=f"Bearer {served.key}") as cli:
        made = (await cli.post("/v1/console/login-tokens")).json()
    assert made["path"] == f"/console/#login={made['token']}"
    assert made["key_name"] == "admin"

    browser = served.client(origin=served.origin)
    async with browser:
        login = await browser.post("/console/api/session", json={"token": made["token"]})
        assert login.status_code == 200, login.text
        cookie = login.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        assert "Secure" not in cookie  # plain http on loopback; https would add it
        session = login.json()
        assert session["role"] == "admin" and session["csrf"]
        assert (await browser.get("/console/api/session")).json()["csrf"] == session["csrf"]

        # The ordinary API, authenticated by the cookie alone: reads as they are ...
        assert (await browser.get("/v1/capacity")).json()["cpu"]["total"] > 0
        # ... and a change with the CSRF token.
        created = await browser.post(
            "/v1/sandboxes", json={}, headers={"x-corral-csrf": session["csrf"]}
        )
        assert created.status_code == 201, created.text
        sandbox_id = created.json()["id"]
        listed = (await browser.get("/v1/sandboxes")).json()["sandboxes"]
        assert [s["id"] for s in listed] == [sandbox_id]
        assert listed[0]["owner"] == "admin"  # the key that made it, by name
        # What the sandbox page plots: a sample of its use now.
        sample = (await browser.get(f"/v1/sandboxes/{sandbox_id}/metrics")).json()
        assert sample["sandbox_id"] == sandbox_id
        assert 0 <= sample["cpu_used_pct"] <= 100 and sample["mem_used"] > 0
        assert sample["mem_total"] == created.json()["memory_mib"] * 1024 * 1024

        logout = await browser.delete(
            "/console/api/session", headers={"x-corral-csrf": session["csrf"]}
        )
        assert logout.status_code == 204
        after = await browser.get("/v1/capacity")
        assert after.status_code == 401


async def test_log_in_with_a_pasted_api_key_and_a_wrong_one(served: Served) -> None:
    async with served.client(origin=served.origin) as browser:
        wrong = await browser.post("/console/api/session", json={"api_key": "e2b_nope"})
        assert wrong.status_code == 401
        assert wrong.json()["message"] == "invalid API key"
        assert "set-cookie" not in wrong.headers
        right = await browser.post("/console/api/session", json={"api_key": served.key})
        assert right.status_code == 200 and right.json()["key_name"] == "admin"
        nothing = await browser.post("/console/api/session", json={})
        assert nothing.status_code == 400


async def test_the_built_page_and_its_assets_are_served_with_a_strict_policy(
    served: Served,
) -> None:
    async with served.client() as browser:
        bare = await browser.get("/console")
        assert bare.status_code == 308 and bare.headers["location"] == "/console/"
        page = await browser.get("/console/")
        assert page.status_code == 200 and "<div id=app>" in page.text
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert page.headers["cache-control"] == "no-cache"
        asset = await browser.get("/console/assets/app-1234.js")
        assert asset.status_code == 200 and "immutable" in asset.headers["cache-control"]
        assert (await browser.get("/console/assets/missing.js")).status_code == 404
        assert (await browser.get("/console/%2e%2e/%2e%2e/etc/passwd")).status_code == 404


async def _read_until(socket: ClientConnection, pattern: bytes, seen: bytearray) -> None:
    start = len(seen)
    async for frame in socket:
        if isinstance(frame, bytes):
            seen += frame
            if re.search(pattern, bytes(seen[start:])):
                return
        else:
            message = json.loads(frame)
            assert message["type"] != "error", message
            if message["type"] == "exit":
                break
    raise AssertionError(f"{pattern!r} never showed; the terminal said {bytes(seen)!r}")


async def test_terminal_over_a_websocket_types_resizes_interrupts_and_reattaches(
    served: Served,
) -> None:
    browser, csrf = await served.logged_in()
    try:
        created = await browser.post("/v1/sandboxes", json={}, headers={"x-corral-csrf": csrf})
        sandbox_id = created.json()["id"]
        cookie = "; ".join(f"{k}={v}" for k, v in browser.cookies.items())
        ws_url = served.url.replace("http", "ws") + f"/console/api/sandboxes/{sandbox_id}/terminal"
        headers = {"Cookie": cookie}

        seen = bytearray()
        async with connect(
            f"{ws_url}?rows=31&cols=97", origin=Origin(served.origin), additional_headers=headers
        ) as socket:
            ready = json.loads(await socket.recv())
            assert ready["type"] == "ready"
            pid = ready["pid"]
            await socket.send(b"PS1='$ '; stty size; echo $((6*7))\r")
            await _read_until(socket, rb"31 97\r\n42\r\n", seen)
            await socket.send(json.dumps({"type": "resize", "rows": 40, "cols": 120}))
            await socket.send(b"stty size\r")
            await _read_until(socket, rb"40 120\r\n", seen)
            await socket.send(b"sleep 100; echo after-sleep\r")
            await socket.send(b"\x03")
            await socket.send(b"echo alive-$((1+1))\r")
            await _read_until(socket, rb"alive-2\r\n", seen)
        assert b"after-sleep\r\n" not in seen.replace(b"echo after-sleep", b"")

        # The page reloads: reattach by pid; the buffered screen replays, typing goes on.
        again = bytearray()
        async with connect(
            f"{ws_url}?rows=40&cols=120&pid={pid}",
            origin=Origin(served.origin),
            additional_headers=headers,
        ) as socket:
            assert json.loads(await socket.recv()) == {"type": "ready", "pid": pid}
            await _read_until(socket, rb"alive-2", again)
            await socket.send(b"exit 3\r")
            async for frame in socket:
                if isinstance(frame, str) and json.loads(frame)["type"] == "exit":
                    assert json.loads(frame)["exit_code"] == 3
                    break
            else:
                raise AssertionError("the terminal never said it exited")
    finally:
        await browser.aclose()
