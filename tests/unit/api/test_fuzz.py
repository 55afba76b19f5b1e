"""A fuzz run of the whole API from its OpenAPI document (schemathesis + hypothesis), with a
member key and with the admin key: no answer may be a 5xx, and the daemon still works after.

Bounded: a few derandomized examples per operation (the same ones every run), no shrinking.
Left out, each for a reason the unit harness has (the e2e suites cover them on the real runtime):
operations that checkpoint a sandbox (park, fork, memory snapshots: the loopback test runtime
cannot, and says so with a 500), template builds (they need the real runtime), and streams that
end only when their reader leaves (events, a process's output, exec, which can run forever).
"""

from __future__ import annotations

import asyncio
from typing import Any

import hypothesis
import schemathesis
from hypothesis import strategies as st
from schemathesis.core.result import Ok

from tests.unit.conftest import Served

EXAMPLES = 5
LEFT_OUT = {
    "park_sandbox",
    "fork_sandbox",
    "snapshot_sandbox",
    "build_template",
    "upload_build_input",
    "follow_events",
    "process_events",
    "exec_command",
    "open_pty",
}


SETTINGS = hypothesis.settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    suppress_health_check=list(hypothesis.HealthCheck),
)


def fuzz_operation(
    operation: Any, url: str, headers: dict[str, str], sandbox_id: str | None
) -> list[str]:
    """``EXAMPLES`` cases of one operation (half of them aimed at ``sandbox_id`` when given);
    the 5xx answers, as ``METHOD PATH -> STATUS: BODY``."""
    failures: list[str] = []

    @SETTINGS
    @hypothesis.given(case=operation.as_strategy(), aim=st.booleans())
    def run(case: schemathesis.Case, aim: bool) -> None:
        if aim and sandbox_id is not None and "sandbox_id" in (case.path_parameters or {}):
            case.path_parameters["sandbox_id"] = sandbox_id
        response = case.call(base_url=url, headers=headers, timeout=30)
        if response.status_code >= 500:
            failures.append(
                f"{case.method} {case.formatted_path} -> {response.status_code}: "
                f"{response.text[:300]}"
            )

    run()
    return failures


def fuzz(url: str, document: dict[str, Any], key: str, sandbox_id: str) -> list[str]:
    """Every operation of ``document`` but ``LEFT_OUT``, with ``key``."""
    schema = schemathesis.openapi.from_dict(document)
    headers = {"Authorization": f"Bearer {key}"}
    failures: list[str] = []
    for result in schema.get_all_operations():
        if not isinstance(result, Ok):
            failures.append(f"the OpenAPI document has an invalid operation: {result.err()}")
            continue
        operation = result.ok()
        operation_id = operation.definition.raw.get("operationId")
        if operation_id in LEFT_OUT:
            continue
        # Killing the real sandbox would leave the other operations only its ended state.
        aimed = None if operation_id == "kill_sandbox" else sandbox_id
        failures += fuzz_operation(operation, url, headers, aimed)
    return failures


async def test_fuzzing_the_api_finds_no_server_errors(served: Served) -> None:
    member = served.key("fuzz-member", "member", rate_limit=1e6)
    async with served.client(None) as anonymous:
        document = (await anonymous.get("/openapi.json")).json()
    async with served.client(member) as client:
        sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    failures = await asyncio.to_thread(fuzz, served.url, document, member, sandbox_id)
    failures += await asyncio.to_thread(fuzz, served.url, document, served.admin_key, sandbox_id)
    assert failures == []
    # Nothing is left broken: the daemon answers, and a new sandbox works end to end.
    async with served.client(served.admin_key) as admin:
        await admin.patch(
            "/v1/policy", json={f: None for f in (await admin.get("/v1/policy")).json()}
        )
        assert (await admin.get("/healthz")).status_code == 200
        created = await admin.post("/v1/sandboxes", json={})
        assert created.status_code == 201, created.text
        async with admin.stream(
            "POST", f"/v1/sandboxes/{created.json()['id']}/exec", json={"cmd": ["echo", "ok"]}
        ) as response:
            assert response.status_code == 200
            assert b'"exit_code":0' in await response.aread()
