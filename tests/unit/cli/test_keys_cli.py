"""`corral key`, `corral policy`, `corral audit` against the real app on the unit harness."""

from __future__ import annotations

import asyncio
import json

from typer.testing import CliRunner

from corral.cli.main import app
from tests.unit.conftest import Served


async def corral(served: Served, key: str, *args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    argv = ["--url", served.url, "--api-key", key, *args]
    # The CLI blocks; the server runs on this loop: the CLI goes to a thread.
    result = await asyncio.to_thread(runner.invoke, app, argv, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


async def test_key_create_ls_revoke_and_the_new_key_works(served: Served) -> None:
    code, out, _ = await corral(
        served, served.admin_key, "key", "create", "ci", "--role", "member", "--expires", "30d",
        "--quota", "running=2", "--scope", "sandboxes,workspace", "--json",
    )  # fmt: skip
    assert code == 0, out
    created = json.loads(out)
    assert created["key"].startswith("e2b_") and created["role"] == "member"
    assert created["quotas"] == {"running": 2.0} and created["expires_at"] is not None
    code, out, _ = await corral(served, created["key"], "key", "whoami")
    assert code == 0 and out.startswith("ci (member)") and "running: 0 of 2" in out
    code, out, _ = await corral(served, served.admin_key, "key", "ls")
    assert code == 0 and "ci\tmember\tsandboxes,workspace" in out
    assert created["key"] not in out
    code, _, err = await corral(served, created["key"], "key", "ls")
    assert code == 1 and "scopes" in err  # a member key may not list keys
    code, out, _ = await corral(served, served.admin_key, "key", "revoke", "ci")
    assert code == 0 and "revoked ci" in out
    code, _, err = await corral(served, created["key"], "capacity")
    assert code == 1 and "revoked" in err


async def test_policy_show_set_and_audit(served: Served) -> None:
    code, out, _ = await corral(
        served, served.admin_key, "policy", "set", "max_cpu=1", "member_min_prefix=8",
        "templates=base", "--json",
    )  # fmt: skip
    assert code == 0, out
    policy = json.loads(out)
    assert policy["max_cpu"] == 1 and policy["templates"] == ["base"]
    member = served.key("m", "member")
    code, out, _ = await corral(served, member, "policy", "show")
    assert code == 0 and "max_cpu\t1" in out and "member_min_prefix\t8" in out
    code, _, err = await corral(served, member, "policy", "set", "max_cpu=2")
    assert code == 1 and "role 'member'" in err
    code, out, _ = await corral(served, served.admin_key, "policy", "set", "max_cpu=default")
    assert code == 0
    code, out, _ = await corral(served, served.admin_key, "audit", "--since", "1h", "--json")
    assert code == 0, out
    entries = [json.loads(line) for line in out.splitlines()]
    actions = [(e["key_name"], e["action"], e["result"]) for e in entries]
    assert ("admin", "set_policy", "ok") in actions
    assert ("m", "set_policy", "forbidden") in actions
    code, out, _ = await corral(served, served.admin_key, "audit", "--key", "m")
    assert code == 0 and out.count("\n") == 1 and "set_policy" in out
