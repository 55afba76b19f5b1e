"""The fake daemon's snapshot routes and the export/import of sandboxes and snapshots."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import httpx

from corral.sdk.testing._state import Failure, FakeState, Route

__all__ = ["SnapshotRoutes"]


class SnapshotRoutes(FakeState):
    """Snapshots, exports and imports: an export is a JSON document of the record and its files."""

    def snapshots_routes(self) -> list[Route]:
        sbx = r"/v1/sandboxes/([^/]+)"
        return [
            ("POST", sbx + r"/snapshots", self._snapshot),
            ("GET", sbx + r"/export", self._export_sandbox),
            ("GET", r"/v1/snapshots", self._list_snapshots),
            ("GET", r"/v1/snapshots/([^/]+)", self._get_snapshot),
            ("DELETE", r"/v1/snapshots/([^/]+)", self._remove_snapshot),
            ("GET", r"/v1/snapshots/([^/]+)/export", self._export_snapshot),
            ("POST", r"/v1/import", self._import),
        ]

    @staticmethod
    def _snapshot_wire(saved: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in saved.items() if key != "files"}

    async def _snapshot(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        record = self._sandbox(sandbox_id, running=True)
        body = json.loads(request.content)
        fs_only = bool(body.get("fs_only"))
        if not fs_only or not body.get("allow_secrets"):
            self._refuse_secrets(record, "snapshot")
        name = body["name"]
        if name in self.snapshots:
            raise Failure(409, "conflict", f"snapshot {name!r} already exists")
        self.snapshots[name] = {
            "name": name,
            "kind": "fs" if fs_only else "memory",
            "source_id": sandbox_id,
            "template": record["template"],
            "cpu": record["cpu"],
            "memory_mib": record["memory_mib"],
            "disk_mib": record["disk_mib"],
            "size_mib": 1,
            "created_at": time.time(),
            "files": dict(self.files[sandbox_id]),
        }
        return httpx.Response(201, json=self._snapshot_wire(self.snapshots[name]))

    async def _list_snapshots(self, request: httpx.Request) -> httpx.Response:
        found = [self._snapshot_wire(saved) for saved in self.snapshots.values()]
        return httpx.Response(200, json={"snapshots": found})

    async def _get_snapshot(self, request: httpx.Request, name: str) -> httpx.Response:
        return httpx.Response(200, json=self._snapshot_wire(self._snapshot_record(name)))

    async def _remove_snapshot(self, request: httpx.Request, name: str) -> httpx.Response:
        self._snapshot_record(name)
        del self.snapshots[name]
        return httpx.Response(204)

    def _export(self, kind: str, record: dict[str, Any], files: dict[str, bytes]) -> bytes:
        encoded = {path: base64.b64encode(data).decode() for path, data in files.items()}
        return json.dumps({"kind": kind, "record": record, "files": encoded}).encode()

    async def _export_sandbox(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        record = self._sandbox(sandbox_id)
        self._refuse_secrets(record, "export")
        if record["state"] != "parked":
            raise Failure(409, "conflict", f"cannot export sandbox {sandbox_id}: park it first")
        data = self._export("sandbox", record, self.files[sandbox_id])
        return httpx.Response(200, content=data, headers={"content-type": "application/x-tar"})

    async def _export_snapshot(self, request: httpx.Request, name: str) -> httpx.Response:
        saved = self._snapshot_record(name)
        data = self._export("snapshot", self._snapshot_wire(saved), saved["files"])
        return httpx.Response(200, content=data, headers={"content-type": "application/x-tar"})

    async def _import(self, request: httpx.Request) -> httpx.Response:
        try:
            exported = json.loads(request.content)
            files = {path: base64.b64decode(data) for path, data in exported["files"].items()}
            kind, record = exported["kind"], exported["record"]
        except (ValueError, KeyError, TypeError) as exc:
            raise Failure(400, "invalid", f"the export is damaged or truncated: {exc}") from exc
        if kind == "snapshot":
            self.snapshots[record["name"]] = {**record, "files": files}
            return httpx.Response(201, json={"kind": "snapshot", "snapshot": record})
        made = self.add_sandbox(**{k: v for k, v in record.items() if k != "id"})
        self.files[made["id"]] = files
        return httpx.Response(201, json={"kind": "sandbox", "sandbox": made})
