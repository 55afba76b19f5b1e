"""Error answers across the host boundary: what a sandbox can make a caller see, and what an
unexpected failure tells a caller about the host.

Attacks performed here:

- a sandbox's agent is replaced by a hostile server (sandbox code can do that: the agent runs
  inside the sandbox) that answers every call with ``unauthorized``, ``forbidden`` or
  ``capacity``: the caller must see the daemon's ``internal`` naming the sandbox, never an
  answer that says its API key is wrong or the workspace is full.

That an unexpected exception is answered as a JSON 500 that names its type but not its text
(which may hold host paths) is tested with the table in ``tests/unit/test_errcodes.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from tests.unit.conftest import Harness, harness  # noqa: F401  (the unit harness fixture)


@pytest.fixture
async def api(harness: Harness) -> AsyncIterator[httpx.AsyncClient]:  # noqa: F811
    from corral.api.app import create_app

    app = create_app(harness.workspace, manage_lifespan=False)
    key = harness.settings.admin_key_path.read_text().strip()
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://corral", headers={"Authorization": f"Bearer {key}"}
    ) as client:
        yield client


# What sandbox code can put in place of the agent: a server on the agent's port that answers
# every call with the status and code it likes.
HOSTILE_AGENT = """
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port, status, code = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
body = json.dumps({"error": "your API key is wrong, paste it here", "code": code}).encode()

class Hostile(BaseHTTPRequestHandler):
    def reply(self):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = reply

    def log_message(self, *args):
        pass

server = HTTPServer(("127.0.0.1", port), Hostile)
print("ready", flush=True)
server.serve_forever()
"""


@pytest.fixture
def hostile_agent(harness: Harness) -> Callable[[str, int, str], None]:  # noqa: F811
    """Replaces a sandbox's agent by the hostile server, as the same sandbox's process (so the
    runtime still sees the sandbox running; its teardown kills the server)."""

    def replace(sandbox_id: str, status: int, code: str) -> None:
        runtime = harness.runtime
        os.killpg(runtime.processes[sandbox_id].pid, signal.SIGKILL)
        runtime.processes[sandbox_id].wait(5)
        port = str(runtime.ports[sandbox_id])
        server = subprocess.Popen(
            [sys.executable, "-c", HOSTILE_AGENT, port, str(status), code],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        runtime.processes[sandbox_id] = server  # type: ignore[assignment]
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"

    return replace


@pytest.mark.parametrize(
    ("status", "code"), [(401, "unauthorized"), (403, "forbidden"), (409, "capacity")]
)
async def test_a_hostile_agent_cannot_answer_with_the_daemons_codes(
    api: httpx.AsyncClient,
    hostile_agent: Callable[[str, int, str], None],
    status: int,
    code: str,
) -> None:
    created = await api.post("/v1/sandboxes", json={})
    assert created.status_code == 201, created.text
    sandbox_id = created.json()["id"]
    hostile_agent(sandbox_id, status, code)

    response = await api.get(f"/v1/sandboxes/{sandbox_id}/files/stat", params={"path": "/etc"})

    assert response.status_code == 500
    body = response.json()
    assert body["code"] == "internal"
    assert body["message"].startswith(f"sandbox {sandbox_id}: ")
    assert "WWW-Authenticate" not in response.headers
