"""Many users on one real daemon, as they would use it: an admin makes a member key with the
CLI, the member works in a gVisor sandbox of its own, another member cannot see it, the admin
reads the audit log and the Prometheus metrics."""

from __future__ import annotations

import json
import os
import subprocess

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import CORRAL, Daemon


def as_key(daemon: Daemon, key: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "CORRAL_URL": daemon.url, "CORRAL_API_KEY": key}
    return subprocess.run([CORRAL, *args], capture_output=True, env=env, timeout=120)


def test_members_keys_ownership_audit_and_metrics(daemon: Daemon) -> None:
    keys = {}
    for name in ("e2e-alice", "e2e-bob"):
        out = daemon.cli(
            "key", "create", name, "--role", "member", "--quota", "running=1", "--json"
        )
        assert out.returncode == 0, out.stderr.decode()
        keys[name] = json.loads(out.stdout)["key"]
    alice, bob = keys["e2e-alice"], keys["e2e-bob"]
    try:
        out = as_key(daemon, alice, "new", "--memory", "256", "--json")
        assert out.returncode == 0, out.stderr.decode()
        sandbox_id = json.loads(out.stdout)["id"]
        out = as_key(daemon, alice, "exec", sandbox_id, "--", "sh", "-c", "echo mine")
        assert (out.returncode, out.stdout) == (0, b"mine\n"), out.stderr
        over = as_key(daemon, alice, "new", "--memory", "256")
        assert over.returncode == 1 and b"running quota" in over.stderr
        hidden = as_key(daemon, bob, "exec", sandbox_id, "--", "true")
        assert (
            hidden.returncode == 1 and f"sandbox {sandbox_id} not found".encode() in hidden.stderr
        )
        listed = as_key(daemon, bob, "ls", "--json")
        assert sandbox_id.encode() not in listed.stdout
        with daemon.client() as admin:
            metrics = admin.get("/metrics")
            assert metrics.status_code == 200
            families = {f.name for f in text_string_to_metric_families(metrics.text)}
            assert {"corral_sandboxes", "corral_request_duration_seconds"} <= families
            entries = admin.get("/v1/audit", params={"sandbox": sandbox_id}).json()["entries"]
            assert [(e["key_name"], e["action"], e["result"]) for e in entries][:2] == [
                ("e2e-alice", "create_sandbox", "ok"),
                ("e2e-alice", "exec_command", "ok"),
            ]
            assert ("e2e-bob", "exec_command", "not_found") in [
                (e["key_name"], e["action"], e["result"]) for e in entries
            ]
        assert as_key(daemon, alice, "kill", sandbox_id).returncode == 0
    finally:
        for name in keys:
            daemon.cli("key", "revoke", name)
    refused = as_key(daemon, alice, "ls")
    assert refused.returncode == 1 and b"revoked" in refused.stderr
