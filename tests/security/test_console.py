"""Attacks on the web console's session, each performed against the daemon on a loopback port.

- a one-time login link used a second time (someone who saw it, or a replayed request);
- another site's page driving the API with the console's cookie: a cross-origin POST (with and
  without a guessed CSRF token), a same-origin-looking POST without the CSRF token, a login
  forced from another origin (login CSRF);
- another site's page opening the terminal WebSocket (browsers send cookies on cross-origin
  WebSocket handshakes: cross-site WebSocket hijacking), and a handshake with no session.
"""

from __future__ import annotations

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.unit.conftest import Harness, harness  # noqa: F401  (the unit harness fixture)
from tests.unit.console.conftest import Served, served  # noqa: F401

EVIL = "http://evil.example"


async def test_a_login_link_works_once(served: Served) -> None:  # noqa: F811
    async with served.client(authorization=f"Bearer {served.key}") as cli:
        token = (await cli.post("/v1/console/login-tokens")).json()["token"]
    async with served.client(origin=served.origin) as first:
        assert (await first.post("/console/api/session", json={"token": token})).status_code == 200
    async with served.client(origin=served.origin) as second:
        again = await second.post("/console/api/session", json={"token": token})
        assert again.status_code == 401
        assert "already used or has expired" in again.json()["message"]
        assert "set-cookie" not in again.headers
        assert (await second.get("/console/api/session")).status_code == 401


async def test_an_expired_login_link_is_refused(served: Served) -> None:  # noqa: F811
    served.harness.workspace.console_sessions.token_ttl = -1.0  # issued already expired
    async with served.client(authorization=f"Bearer {served.key}") as cli:
        token = (await cli.post("/v1/console/login-tokens")).json()["token"]
    async with served.client(origin=served.origin) as browser:
        assert (
            await browser.post("/console/api/session", json={"token": token})
        ).status_code == 401


async def test_cross_origin_requests_with_the_session_cookie_are_refused(
    served: Served,  # noqa: F811
) -> None:
    browser, csrf = await served.logged_in()
    try:
        # Another site's page posts to the daemon; the browser attaches the cookie (were it not
        # SameSite=Strict) and the Origin header of that site.
        for headers in ({"origin": EVIL}, {"origin": EVIL, "x-corral-csrf": csrf}):
            answer = await browser.post("/v1/sandboxes", json={}, headers=headers)
            assert answer.status_code == 403, answer.text
            assert "cross-origin" in answer.json()["message"]
        # No Origin header (an old browser, a form) and no CSRF token: refused too.
        bare = await browser.post("/v1/sandboxes", json={}, headers={"origin": ""})
        assert bare.status_code == 403
        missing = await browser.post("/v1/sandboxes", json={})
        assert missing.status_code == 403 and "CSRF" in missing.json()["message"]
        wrong = await browser.post("/v1/sandboxes", json={}, headers={"x-corral-csrf": "guess"})
        assert wrong.status_code == 403
        assert (await browser.get("/v1/sandboxes")).json()["sandboxes"] == []  # nothing made

        # Login CSRF: another site logs the browser in with the attacker's key.
        forced = await browser.post(
            "/console/api/session", json={"api_key": served.key}, headers={"origin": EVIL}
        )
        assert forced.status_code == 403
    finally:
        await browser.aclose()


async def test_terminal_websocket_refuses_other_origins_and_no_session(
    served: Served,  # noqa: F811
) -> None:
    browser, csrf = await served.logged_in()
    try:
        created = await browser.post("/v1/sandboxes", json={}, headers={"x-corral-csrf": csrf})
        sandbox_id = created.json()["id"]
        cookie = "; ".join(f"{k}={v}" for k, v in browser.cookies.items())
        url = served.url.replace("http", "ws") + f"/console/api/sandboxes/{sandbox_id}/terminal"
        for origin, headers in (
            (EVIL, {"Cookie": cookie}),  # cross-site WebSocket hijacking
            (None, {"Cookie": cookie}),  # a non-browser client replaying the cookie, no Origin
            (served.origin, {}),  # the console's own origin but no session
            (served.origin, {"Cookie": "corral_session=forged"}),
        ):
            with pytest.raises(InvalidStatus) as refused:
                async with connect(url, origin=origin, additional_headers=headers):  # type: ignore[arg-type]
                    pass
            assert refused.value.response.status_code == 403
        # No terminal was started by any of them.
        processes = await browser.get(f"/v1/sandboxes/{sandbox_id}/processes")
        assert [p for p in processes.json()["processes"] if p.get("pty")] == []
    finally:
        await browser.aclose()
