"""The fake daemon's workspace and sandbox routes: capacity, templates, create, list, kill,
park/wake, fork."""

from __future__ import annotations

import json

import httpx

from corral.sdk.testing._state import Failure, FakeState, Route

__all__ = ["SandboxRoutes"]


class SandboxRoutes(FakeState):
    """Sandboxes and their lifecycle, as the daemon answers them."""

    def sandboxes_routes(self) -> list[Route]:
        sbx = r"/v1/sandboxes/([^/]+)"
        return [
            ("GET", r"/v1/capacity", self._capacity),
            ("GET", r"/v1/templates", self._templates),
            ("POST", r"/v1/sandboxes", self._create),
            ("GET", r"/v1/sandboxes", self._list),
            ("GET", sbx, self._get),
            ("DELETE", sbx, self._kill),
            ("POST", sbx + r"/(park|wake)", self._transition),
            ("POST", sbx + r"/fork", self._fork),
        ]

    async def _capacity(self, request: httpx.Request) -> httpx.Response:
        usage = {"total": 16.0, "reserved": 1.0, "free": 15.0}
        memory = {"total": 8192.0, "reserved": 512.0, "free": 7680.0}
        disk = {"total": 40960.0, "reserved": 1024.0, "free": 39936.0}
        body = {"cpu": usage, "memory": memory, "disk": disk, "cpu_overcommit": 8}
        return httpx.Response(200, json=body)

    async def _templates(self, request: httpx.Request) -> httpx.Response:
        base = {"name": "base", "image": "debian:bookworm", "cpu": 1.0, "memory_mib": 512}
        base |= {"disk_mib": 1024, "created_at": 1_700_000_000.0}
        return httpx.Response(200, json={"templates": [base]})

    async def _create(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body.get("template", "base") != "base":
            raise Failure(404, "not_found", f"no template {body['template']}")
        if (body.get("memory_mib") or 0) > 8192:
            raise Failure(409, "capacity", "memory_mib 9000 is over the free 7680 MiB by 1320")
        # Secret values are used and forgotten, as the daemon does: only their names are kept.
        body["secret_env_keys"] = sorted(body.pop("secret_env", None) or {})
        snapshot = body.pop("snapshot", None)
        if snapshot is None:
            return httpx.Response(201, json=self.add_sandbox(**body))
        saved = self._snapshot_record(snapshot)
        record = self.add_sandbox(**body, parent_id=saved["source_id"])
        self.files[record["id"]] = dict(saved["files"])
        return httpx.Response(201, json=record)

    async def _list(self, request: httpx.Request) -> httpx.Response:
        state = request.url.params.get("state")
        ended = request.url.params.get("all") == "true"
        wanted = [pair.split("=", 1) for pair in request.url.params.get_list("metadata")]
        found = [
            record
            for record in self.sandboxes.values()
            if (record["state"] == state if state else ended or record["state"] != "killed")
            and all(record["metadata"].get(key) == value for key, value in wanted)
        ]
        return httpx.Response(200, json={"sandboxes": found})

    async def _get(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        return httpx.Response(200, json=self._sandbox(sandbox_id))

    async def _kill(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        self._sandbox(sandbox_id)["state"] = "killed"
        return httpx.Response(204)

    async def _transition(
        self, request: httpx.Request, sandbox_id: str, action: str
    ) -> httpx.Response:
        record = self._sandbox(sandbox_id)
        if action == "wake" and record["state"] == "running":
            return httpx.Response(200, json=record)  # as the daemon: waking is idempotent
        wanted_from, to = ("running", "parked") if action == "park" else ("parked", "running")
        if record["state"] != wanted_from:
            raise Failure(
                409, "conflict", f"cannot {action} sandbox {sandbox_id} in state {record['state']}"
            )
        record["state"] = to
        return httpx.Response(200, json=record)

    async def _fork(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        parent = self._sandbox(sandbox_id, running=True)
        self._refuse_secrets(parent, "fork")
        count = int(json.loads(request.content).get("count", 1))
        children = []
        for _ in range(count):
            child = self.add_sandbox(
                template=parent["template"],
                metadata=dict(parent["metadata"]),
                parent_id=sandbox_id,
            )
            self.files[child["id"]] = dict(self.files[sandbox_id])
            children.append(child)
        return httpx.Response(201, json={"sandboxes": children})
