"""Roles x routes: every route of the OpenAPI document, called with each kind of key.

``EXPECTED`` has one row per operation: what an admin, the member that owns the sandbox, another
member, a viewer and a member limited to the ``templates`` scope get. A route missing from the
table fails ``test_every_route_has_a_row`` (so a new route cannot ship without deciding who may
call it); a key-less call must get 401 everywhere but the public routes.

``ok``: the call got past authorization (any answer but 401/403, and not the "not found" of a
sandbox the key may not see); ``403``: refused for its role or scopes; ``404``: the sandbox of
another member, answered exactly as a missing one.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from corral.api.permissions import PUBLIC, ROUTES
from corral.service import auth
from tests.unit.conftest import Served

COLUMNS = ("admin", "owner", "other", "viewer", "scoped")
# op: admin, owner, other member, viewer, member scoped to templates
SANDBOX_READ = ("ok", "ok", "404", "ok", "403")
SANDBOX_WRITE = ("ok", "ok", "404", "403", "403")
OPEN_READ = ("ok", "ok", "ok", "ok", "403")
OPEN_WRITE = ("ok", "ok", "ok", "403", "403")
ADMIN_ONLY = ("ok", "403", "403", "403", "403")
TEMPLATE_READ = ("ok", "ok", "ok", "ok", "ok")
TEMPLATE_WRITE = ("ok", "ok", "ok", "403", "ok")
EXPECTED: dict[str, tuple[str, ...]] = {
    "create_sandbox": OPEN_WRITE,
    "list_sandboxes": OPEN_READ,
    "get_sandbox": SANDBOX_READ,
    "kill_sandbox": SANDBOX_WRITE,
    "park_sandbox": SANDBOX_WRITE,
    "wake_sandbox": SANDBOX_WRITE,
    "fork_sandbox": SANDBOX_WRITE,
    "set_sandbox_network": SANDBOX_WRITE,
    "export_sandbox": SANDBOX_WRITE,
    "exec_command": SANDBOX_WRITE,
    "list_processes": SANDBOX_READ,
    "execute_code": SANDBOX_WRITE,
    "create_code_context": SANDBOX_WRITE,
    "list_code_contexts": SANDBOX_READ,
    "restart_code_context": SANDBOX_WRITE,
    "remove_code_context": SANDBOX_WRITE,
    "get_process": SANDBOX_READ,
    "process_events": SANDBOX_READ,
    "send_stdin": SANDBOX_WRITE,
    "close_stdin": SANDBOX_WRITE,
    "signal_process": SANDBOX_WRITE,
    "open_pty": SANDBOX_WRITE,
    "resize_pty": SANDBOX_WRITE,
    "read_file": SANDBOX_READ,
    "stat_file": SANDBOX_READ,
    "list_files": SANDBOX_READ,
    "write_file": SANDBOX_WRITE,
    "make_dir": SANDBOX_WRITE,
    "move_file": SANDBOX_WRITE,
    "remove_file": SANDBOX_WRITE,
    "snapshot_sandbox": SANDBOX_WRITE,
    "list_ports": SANDBOX_WRITE,
    "open_port": SANDBOX_WRITE,
    "close_port": SANDBOX_WRITE,
    "list_templates": TEMPLATE_READ,
    "get_template": TEMPLATE_READ,
    "template_logs": TEMPLATE_READ,
    "list_recipes": TEMPLATE_READ,
    "upload_build_input": TEMPLATE_WRITE,
    "build_template": TEMPLATE_WRITE,
    "delete_template": TEMPLATE_WRITE,
    "share_template": ADMIN_ONLY,
    "list_snapshots": OPEN_READ,
    "get_snapshot": OPEN_READ,
    "remove_snapshot": OPEN_WRITE,
    "export_snapshot": OPEN_WRITE,
    "import_file": ADMIN_ONLY,
    "get_capacity": OPEN_READ,
    "get_policy": OPEN_READ,
    "set_policy": ADMIN_ONLY,
    "follow_events": OPEN_READ,
    "get_metrics": ADMIN_ONLY,
    "get_self": ("ok", "ok", "ok", "ok", "ok"),
    "create_key": ADMIN_ONLY,
    "list_keys": ADMIN_ONLY,
    "revoke_key": ADMIN_ONLY,
    "query_audit": ADMIN_ONLY,
    "list_services": ADMIN_ONLY,
    "put_service": ADMIN_ONLY,
    "remove_service": ADMIN_ONLY,
    "list_secrets": ADMIN_ONLY,
    "secret_log": ADMIN_ONLY,
    "get_secret": ADMIN_ONLY,
    "put_secret": ADMIN_ONLY,
    "remove_secret": ADMIN_ONLY,
    "rotate_secret": ADMIN_ONLY,
    "revoke_secret": ADMIN_ONLY,
    "create_console_login_token": ("ok", "ok", "ok", "ok", "ok"),
    "sandbox_metrics": SANDBOX_READ,
    "list_trusted_keys": ADMIN_ONLY,
    "get_workspace_key": ADMIN_ONLY,
    "add_trusted_key": ADMIN_ONLY,
    "remove_trusted_key": ADMIN_ONLY,
}
# Bodies that are not JSON objects.
RAW_BODIES = {"write_file", "send_stdin", "import_file", "upload_build_input"}


def operations(document: dict[str, Any]) -> list[tuple[str, str, str]]:
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in ("get", "post", "put", "patch", "delete"):
                found.append((operation["operationId"], method.upper(), path))
    return found


async def test_every_route_has_a_row(served: Served) -> None:
    async with served.client(None) as client:
        document = (await client.get("/openapi.json")).json()
    ops = {op for op, _, _ in operations(document)}
    assert ops - PUBLIC - set(EXPECTED) == set(), "routes without a row in EXPECTED"
    assert set(EXPECTED) - ops == set(), "rows for routes that are gone"
    assert set(ROUTES) >= set(EXPECTED), "routes without a permission (refused to everyone)"


def fill(path: str, sandbox_id: str) -> str:
    return (
        path.replace("{sandbox_id}", sandbox_id)
        .replace("{pid}", "999999")
        .replace("{port}", "8080")
        .replace("{name}", "no-such-thing")
    )


async def call(client: httpx.AsyncClient, op: str, method: str, path: str) -> httpx.Response:
    kwargs: dict[str, Any] = {"params": {"path": "/tmp"}}
    if method in ("POST", "PUT", "PATCH"):
        if op in RAW_BODIES:
            kwargs["content"] = b"x"
        else:
            kwargs["json"] = {}
    # Streams (events, exec, process output) are judged by their status line only.
    async with client.stream(method, path, **kwargs) as response:
        if response.status_code >= 400:
            await response.aread()
        return response


def judge(response: httpx.Response, sandbox_id: str) -> str:
    if response.status_code in (401, 403):
        return str(response.status_code)
    if response.status_code == 404:
        body = response.json()
        if body.get("message") == f"sandbox {sandbox_id} not found":
            return "404"
    return "ok"


async def test_roles_by_route(served: Served) -> None:
    owner = served.key("owner", "member")
    keys = {
        "admin": served.admin_key,
        "owner": owner,
        "other": served.key("other", "member"),
        "viewer": served.key("viewer", "viewer"),
        "scoped": served.key("scoped", "member", scopes=["templates"]),
    }
    async with served.client(owner) as client:
        created = await client.post("/v1/sandboxes", json={})
        assert created.status_code == 201, created.text
        sandbox_id = created.json()["id"]
        document = (await client.get("/openapi.json")).json()
    mismatches: list[tuple[str, str, int | str]] = []
    # One client per key (a client's TLS context costs tens of milliseconds to make).
    clients = {column: served.client(key) for column, key in keys.items()}
    anonymous = served.client(None)
    try:
        for op, method, path in operations(document):
            if op in PUBLIC:
                continue
            url = fill(path, sandbox_id)
            response = await call(anonymous, op, method, url)
            if response.status_code != 401:
                mismatches.append((op, "no key", response.status_code))
            # Owner last but one and admin last: their calls may change the sandbox (kill it).
            for column in ("other", "viewer", "scoped", "owner", "admin"):
                response = await call(clients[column], op, method, url)
                want = EXPECTED[op][COLUMNS.index(column)]
                got = judge(response, sandbox_id)
                if got != want:
                    mismatches.append((op, column, f"want {want}, got {response.status_code}"))
    finally:
        for client in [*clients.values(), anonymous]:
            await client.aclose()
    assert mismatches == []


async def test_other_members_sandbox_is_not_listed_and_answers_like_a_missing_one(
    served: Served,
) -> None:
    alice = served.key("alice", "member")
    bob = served.key("bob", "member")
    async with served.client(alice) as a, served.client(bob) as b:
        mine = (await a.post("/v1/sandboxes", json={})).json()["id"]
        theirs = (await b.post("/v1/sandboxes", json={})).json()["id"]
        listed = [s["id"] for s in (await a.get("/v1/sandboxes")).json()["sandboxes"]]
        assert listed == [mine]
        hidden = await a.get(f"/v1/sandboxes/{theirs}")
        missing = await a.get("/v1/sandboxes/sb-doesnotexist")
        assert hidden.status_code == missing.status_code == 404
        assert hidden.json() == {"code": "not_found", "message": f"sandbox {theirs} not found"}
        killed = await a.delete(f"/v1/sandboxes/{theirs}")
        assert killed.status_code == 404
        assert (await b.get(f"/v1/sandboxes/{theirs}")).json()["state"] == "running"
    async with served.client(served.admin_key) as admin:
        everything = [s["id"] for s in (await admin.get("/v1/sandboxes")).json()["sandboxes"]]
        assert set(everything) >= {mine, theirs}


async def test_templates_members_see_their_own_and_shared(served: Served) -> None:
    ws = served.harness.workspace
    alice = served.key("alice", "member")
    bob = served.key("bob", "member")
    base = ws.db.templates.get("base")
    assert base is not None and base.shared  # the prebuilt one is the workspace's
    alices = replace(base, name="alices", owner=ws.api_keys.get("alice").id, shared=False)
    ws.db.templates.put(alices)
    async with served.client(alice) as a, served.client(bob) as b:
        names_a = {t["name"] for t in (await a.get("/v1/templates")).json()["templates"]}
        names_b = {t["name"] for t in (await b.get("/v1/templates")).json()["templates"]}
        assert names_a == {"base", "alices"} and names_b == {"base"}
        assert (await b.get("/v1/templates/alices")).status_code == 404
        refused = await b.post("/v1/sandboxes", json={"template": "alices"})
        assert refused.status_code == 404 and "alices" in refused.json()["message"]
        made = await a.post("/v1/sandboxes", json={"template": "alices"})
        assert made.status_code == 201, made.text
        # A member may not delete a shared template it does not own (nor share its own).
        assert (await b.delete("/v1/templates/base")).status_code == 403
        assert (await a.put("/v1/templates/alices/shared", json={})).status_code == 403
    async with served.client(served.admin_key) as admin:
        shared = await admin.put("/v1/templates/alices/shared", json={"shared": True})
        assert shared.status_code == 200 and shared.json()["shared"] is True
    async with served.client(bob) as b:
        assert (await b.get("/v1/templates/alices")).status_code == 200


async def test_keys_are_listed_without_secrets_and_revoked_or_expired_keys_get_401(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with served.client(served.admin_key) as admin:
        created = await admin.post(
            "/v1/keys", json={"name": "ci", "role": "member", "scopes": ["sandboxes"]}
        )
        assert created.status_code == 201, created.text
        key = created.json()["key"]
        assert key.startswith("e2b_") and len(key) == 44
        again = await admin.post("/v1/keys", json={"name": "ci", "role": "viewer"})
        assert again.status_code == 409
        async with served.client(key) as ci:
            assert (await ci.get("/v1/sandboxes")).status_code == 200
            me = (await ci.get("/v1/keys/self")).json()
            assert me["name"] == "ci" and me["role"] == "member"
            assert me["usage"]["running"] == 0
            listed = (await admin.get("/v1/keys")).json()["keys"]
            row = next(k for k in listed if k["name"] == "ci")
            assert row["last_used_at"] is not None and row["scopes"] == ["sandboxes"]
            assert key not in json.dumps(listed) and "key_hash" not in json.dumps(listed)
            stored = served.harness.workspace.db.api_keys.find_active("ci")
            assert stored is not None and key not in repr(stored)
            assert (await admin.delete("/v1/keys/ci")).status_code == 204
            refused = await ci.get("/v1/sandboxes")  # at once: no cache keeps it alive
            assert refused.status_code == 401 and "revoked" in refused.json()["message"]
        # An hour of validity (a loaded machine cannot outrun it), then the daemon's clock is
        # moved past the expiry rather than waited for.
        short = served.harness.workspace.api_keys.issue(
            "short", "member", expires_at=time.time() + 3600
        )[0]
        async with served.client(short) as s:
            assert (await s.get("/v1/sandboxes")).status_code == 200
            expiry = served.harness.workspace.api_keys.get("short").expires_at
            assert expiry is not None
            later = SimpleNamespace(time=lambda: expiry + 1, monotonic=time.monotonic)
            monkeypatch.setattr(auth, "time", later)
            expired = await s.get("/v1/sandboxes")
            assert expired.status_code == 401 and "expired" in expired.json()["message"]
        # The last admin key cannot revoke itself.
        last = await admin.delete("/v1/keys/admin")
        assert last.status_code == 403 and "last admin key" in last.json()["message"]


@pytest.mark.parametrize("header", ["Authorization", "X-API-KEY"])
async def test_the_admin_key_file_works_in_either_header(served: Served, header: str) -> None:
    value = served.admin_key if header == "X-API-KEY" else f"Bearer {served.admin_key}"
    async with httpx.AsyncClient(base_url=served.url, headers={header: value}) as client:
        assert (await client.get("/v1/keys")).status_code == 200
