"""Quotas per key and the workspace policy, as a caller sees them: each refusal names what
refused it (the quota, its use and the excess; the policy field), and a policy change applies
to the next request at once."""

from __future__ import annotations

import time

import httpx

from tests.unit.conftest import Served


async def refused(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code, body
    return str(body["message"])


async def test_running_and_memory_quotas_name_the_quota_the_use_and_the_excess(
    served: Served,
) -> None:
    key = served.key("q", "member", quotas={"running": 2, "memory_mib": 600})
    async with served.client(key) as client:
        first = await client.post("/v1/sandboxes", json={"memory_mib": 256})
        assert first.status_code == 201, first.text
        message = await refused(
            await client.post("/v1/sandboxes", json={"memory_mib": 512}), 403, "quota"
        )
        assert "memory_mib quota of API key 'q'" in message
        assert "quota 600 MiB, in use 256, this needs 512 more, 168 over" in message
        second = await client.post("/v1/sandboxes", json={"memory_mib": 256})
        assert second.status_code == 201, second.text
        message = await refused(await client.post("/v1/sandboxes", json={}), 403, "quota")
        assert "running quota" in message and "quota 2 sandboxes, in use 2" in message
        assert "1 over" in message
        me = (await client.get("/v1/keys/self")).json()
        assert me["usage"]["running"] == 2 and me["usage"]["memory_mib"] == 512
        # Killing one frees its share at once.
        assert (await client.delete(f"/v1/sandboxes/{first.json()['id']}")).status_code == 204
        assert (await client.post("/v1/sandboxes", json={"memory_mib": 256})).status_code == 201
    async with served.client(served.admin_key) as admin:  # the admin key has no quotas
        for _ in range(3):
            assert (await admin.post("/v1/sandboxes", json={})).status_code == 201


async def test_policy_refusals_name_the_policy_and_apply_at_once(served: Served) -> None:
    member = served.key("m", "member")
    async with served.client(served.admin_key) as admin, served.client(member) as client:
        changed = await admin.patch(
            "/v1/policy",
            json={
                "max_cpu": 1,
                "max_ttl_seconds": 600,
                "default_ttl_seconds": 300,
                "member_min_prefix": 8,
                "member_rule_kinds": ["cidr", "host"],
                "max_forks": 1,
            },
        )
        assert changed.status_code == 200, changed.text
        message = await refused(await client.post("/v1/sandboxes", json={"cpu": 2}), 400, "invalid")
        assert "cpu 2 is outside 0.05..1 vCPUs" in message
        message = await refused(
            await client.post("/v1/sandboxes", json={"ttl_seconds": 3600}), 400, "invalid"
        )
        assert "ttl 3600 s is outside 1..600 s" in message
        message = await refused(
            await client.post("/v1/sandboxes", json={"allow": ["0.0.0.0/0"]}), 403, "policy"
        )
        assert "prefix /0 is shorter than the policy's /8 by 8" in message
        message = await refused(
            await client.post("/v1/sandboxes", json={"allow": ["*.example.com"]}), 403, "policy"
        )
        assert "may not" not in message and "wildcard rules" in message
        # The shapes bind members, not admins.
        wide = await admin.post("/v1/sandboxes", json={"allow": ["0.0.0.0/0"]})
        assert wide.status_code == 201, wide.text
        made = await client.post("/v1/sandboxes", json={"allow": ["203.0.113.0/24:443"]})
        assert made.status_code == 201, made.text
        sandbox = made.json()
        assert 290 <= sandbox["expires_at"] - time.time() <= 300  # the policy's default TTL
        message = await refused(
            await client.post(f"/v1/sandboxes/{sandbox['id']}/fork", json={"count": 2}),
            403,
            "policy",
        )
        assert "at most 1 forks per call; 2 asked, 1 over" in message
        message = await refused(
            await client.put(
                f"/v1/sandboxes/{sandbox['id']}/network", json={"allow": ["10.0.0.0/7"]}
            ),
            403,
            "policy",
        )
        assert "/7" in message
        # Templates and runtimes, then modes: each change applies to the very next request.
        await admin.patch("/v1/policy", json={"templates": ["py-*"]})
        message = await refused(await client.post("/v1/sandboxes", json={}), 403, "policy")
        assert "template 'base'" in message and "py-*" in message
        await admin.patch("/v1/policy", json={"templates": None, "runtimes": ["gvisor"]})
        message = await refused(await client.post("/v1/sandboxes", json={}), 403, "policy")
        assert "runtime 'local'" in message
        await admin.patch("/v1/policy", json={"runtimes": None, "network_modes": ["airgapped"]})
        message = await refused(
            await client.put(f"/v1/sandboxes/{sandbox['id']}/network", json={"mode": "internet"}),
            400,
            "invalid",
        )
        assert "'internet' is not allowed by the workspace policy" in message
        policy = (await client.get("/v1/policy")).json()  # every key may read it
        assert policy["network_modes"] == ["airgapped"] and policy["max_cpu"] == 1
        assert (await client.patch("/v1/policy", json={"max_cpu": 8})).status_code == 403
        bad = await admin.patch("/v1/policy", json={"max_cpu": 10_000})
        assert "max_cpu must be above 0 and at most the daemon's" in await refused(
            bad, 400, "invalid"
        )


async def test_a_key_over_its_rate_limit_gets_429_with_retry_after(served: Served) -> None:
    key = served.key("slow", "member", rate_limit=0.1)  # one request per 10 s, a burst of one
    async with served.client(key) as client:
        first = await client.get("/v1/capacity")
        second = await client.get("/v1/capacity")
    assert first.status_code == 200
    assert second.status_code == 429
    assert second.json()["code"] == "rate_limited" and "0.1 requests per second" in second.text
    assert 1 <= int(second.headers["retry-after"]) <= 10
