"""The HTTP API as a raw client sees it: auth, errors, limits, the OpenAPI document."""

from __future__ import annotations

import base64
import json
import time

import httpx

from tests.e2e.conftest import Daemon
from tests.e2e.workloads import wait_until


def exec_lines(client: httpx.Client, sbx: str, body: dict) -> list[dict]:
    with client.stream("POST", f"/v1/sandboxes/{sbx}/exec", json=body) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line) for line in response.iter_lines() if line]


def test_auth_is_required(daemon: Daemon) -> None:
    assert httpx.get(daemon.url + "/healthz").status_code == 200
    doc = httpx.get(daemon.url + "/openapi.json").json()
    ops = {op["operationId"] for path in doc["paths"].values() for op in path.values()}
    assert {"create_sandbox", "exec_command", "read_file", "kill_sandbox", "get_capacity"} <= ops
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}):
        response = httpx.get(daemon.url + "/v1/sandboxes", headers=headers)
        assert response.status_code == 401
        assert response.json()["code"] == "unauthorized"
        assert "sandboxes" not in response.text
    mode = (daemon.data_dir / "admin.key").stat().st_mode & 0o777
    assert mode == 0o600


def test_errors_have_code_and_message(daemon: Daemon) -> None:
    with daemon.client() as client:
        response = client.get("/v1/sandboxes/sb-nope")
        assert response.status_code == 404
        assert response.json() == {"code": "not_found", "message": "sandbox sb-nope not found"}
        response = client.post("/v1/sandboxes", json={"memory_mib": "lots"})
        assert response.status_code == 422 and response.json()["code"] == "invalid"
        response = client.post("/v1/sandboxes", json={"template": "nope"})
        assert response.status_code == 404 and "nope" in response.json()["message"]
        response = client.post("/v1/sandboxes", json={"disk_mib": 10**9})
        assert response.status_code == 400 and "disk" in response.json()["message"]


def test_memory_limit_kills_the_process_and_reports(daemon: Daemon) -> None:
    # Like a VM's kernel: the process that ran the sandbox out of memory dies, the sandbox lives.
    with daemon.client() as client:
        sbx = client.post("/v1/sandboxes", json={"memory_mib": 128}).json()["id"]
        try:
            body = {"cmd": ["python3", "-c", "x = bytearray(400 * 1024 * 1024); print(len(x))"]}
            events = exec_lines(client, sbx, body)
            exit_event = events[-1]
            assert exit_event["type"] == "exit" and exit_event["signal"] == 9, exit_event
            stderr = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "stderr")
            assert b"out of memory" in stderr and b"128 MiB" in stderr
            assert client.get(f"/v1/sandboxes/{sbx}").json()["state"] == "running"
            again = exec_lines(client, sbx, {"cmd": ["echo", "alive"]})
            assert again[-1]["exit_code"] == 0
        finally:
            client.delete(f"/v1/sandboxes/{sbx}")


def test_fork_bomb_stays_inside_pids_limit(daemon: Daemon) -> None:
    with daemon.client() as client:
        sbx = client.post("/v1/sandboxes", json={"memory_mib": 512}).json()["id"]
        try:
            bomb = "bomb() { bomb | bomb & }; bomb; sleep 2"
            # Inside gVisor the bomb's thousands of runnable tasks starve the agent, so its 8 s
            # timeout can fire late; the daemon then ends the exec itself 8 s + its grace (10 s)
            # after it started. Or the bomb fills the sandbox's memory first and gets it killed.
            # On a loaded host the start alone can take long (hence the read timeout).
            with client.stream(
                "POST",
                f"/v1/sandboxes/{sbx}/exec",
                json={"shell": bomb, "timeout": 8},
                timeout=httpx.Timeout(30, read=300),
            ) as response:
                assert response.status_code == 200, response.read()
                events = [json.loads(line) for line in response.iter_lines() if line]
            # The host is fine and the daemon answers.
            assert httpx.get(daemon.url + "/healthz").status_code == 200
            last = events[-1]
            if last["type"] == "exit" and "error" not in last:
                # The agent's timeout won: it killed the bomb, the sandbox is still usable.
                assert last["timed_out"] is True
                assert exec_lines(client, sbx, {"cmd": ["true"]})[-1]["exit_code"] == 0
            elif last["type"] == "exit":
                # The agent was starved: the daemon ended the exec, said why, and asked the
                # agent to kill the bomb once it can; the sandbox is still listed as it is.
                assert last["timed_out"] is True and last["exit_code"] is None, last
                assert sbx in last["error"] and "timeout" in last["error"], last
                state = client.get(f"/v1/sandboxes/{sbx}").json()["state"]
                assert state in ("running", "killed", "error"), state
            else:
                # The stream broke because the sandbox died: it is reported as ended, with why,
                # never left "running" but dead.
                def ended() -> dict | None:
                    info = client.get(f"/v1/sandboxes/{sbx}").json()
                    return info if info["state"] != "running" else None

                info = wait_until(ended, timeout=60, what="the bombed sandbox's state")
                assert info["state"] in ("killed", "error"), info
                assert "memory" in (info["error"] or ""), info
        finally:
            client.delete(f"/v1/sandboxes/{sbx}")


def test_disk_limit_fails_inside(daemon: Daemon) -> None:
    with daemon.client() as client:
        sbx = client.post("/v1/sandboxes", json={"disk_mib": 64}).json()["id"]
        try:
            events = exec_lines(
                client,
                sbx,
                {"shell": "dd if=/dev/zero of=/big bs=1M count=200 2>&1; echo rc=$?"},
            )
            out = b"".join(
                base64.b64decode(e["data"]) for e in events if e["type"] == "stdout"
            ).decode()
            assert "No space left on device" in out
            assert "rc=1" in out
            small = exec_lines(client, sbx, {"shell": "rm /big; echo ok > /small && cat /small"})
            assert small[-1]["exit_code"] == 0
        finally:
            client.delete(f"/v1/sandboxes/{sbx}")


def test_ttl_ends_sandbox(daemon: Daemon) -> None:
    with daemon.client() as client:
        created = client.post("/v1/sandboxes", json={"ttl_seconds": 2}).json()
        assert created["expires_at"] is not None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if client.get(f"/v1/sandboxes/{created['id']}").json()["state"] == "killed":
                break
            time.sleep(0.5)
        assert client.get(f"/v1/sandboxes/{created['id']}").json()["state"] == "killed"


def test_list_filters(daemon: Daemon) -> None:
    with daemon.client() as client:
        a = client.post("/v1/sandboxes", json={"metadata": {"team": "red"}}).json()["id"]
        b = client.post("/v1/sandboxes", json={"metadata": {"team": "blue"}}).json()["id"]
        try:
            red = client.get("/v1/sandboxes", params={"metadata": "team=red"}).json()
            assert [s["id"] for s in red["sandboxes"]] == [a]
            client.delete(f"/v1/sandboxes/{b}")
            killed = client.get("/v1/sandboxes", params={"state": "killed"}).json()
            assert b in [s["id"] for s in killed["sandboxes"]]
        finally:
            client.delete(f"/v1/sandboxes/{a}")
            client.delete(f"/v1/sandboxes/{b}")
