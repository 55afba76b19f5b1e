"""The fake daemon's state, its request dispatch and the helpers every resource shares.

`FakeState` holds what the fake knows (public: tests arrange and assert on it) and answers a
request by the routes its subclass lists; a handler raises `Failure` for an API error answer.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from corral.sdk.testing.commands import CommandOutcome, default_run

__all__ = ["Failure", "FakeProcess", "FakeState", "Route"]

Route = tuple[str, str, Callable[..., Awaitable[httpx.Response]]]


@dataclass
class FakeProcess:
    """One process of a fake sandbox: its request, stdin so far and its event log."""

    pid: int
    argv: list[str]
    request: dict[str, Any]
    stdin: bytearray = field(default_factory=bytearray)
    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False


class Failure(Exception):
    """An API error answer: HTTP `status` with the daemon's `code` and `message`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class FakeState:
    """What the fake daemon holds, and the dispatch of a request to a route's handler."""

    def __init__(self, api_key: str = "test-key") -> None:
        self.api_key = api_key
        self.sandboxes: dict[str, dict[str, Any]] = {}
        self.files: dict[str, dict[str, bytes]] = {}
        self.processes: dict[str, dict[int, FakeProcess]] = {}
        self.snapshots: dict[str, dict[str, Any]] = {}
        self.requests: list[httpx.Request] = []
        self.break_streams_after: int | None = None
        self.fail_next: tuple[int, str, str] | None = None
        self.run: Callable[[list[str], bytes, float | None], CommandOutcome] = default_run
        self._next_id = 0
        self.transport = httpx.MockTransport(self._handle)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        await request.aread()
        try:
            if request.url.path == "/healthz":
                return httpx.Response(200, json={"ok": True})
            if request.headers.get("authorization") != f"Bearer {self.api_key}":
                raise Failure(401, "unauthorized", "missing or wrong API key")
            if self.fail_next is not None:
                status, code, message = self.fail_next
                self.fail_next = None
                raise Failure(status, code, message)
            for method, pattern, handler in self._routes():
                match = re.fullmatch(pattern, request.url.path)
                if match and request.method == method:
                    result: httpx.Response = await handler(request, *match.groups())
                    return result
            raise Failure(404, "not_found", f"no route {request.method} {request.url.path}")
        except Failure as failure:
            body = {"code": failure.code, "message": failure.message}
            return httpx.Response(failure.status, json=body)

    def _sandbox(self, sandbox_id: str, *, running: bool = False) -> dict[str, Any]:
        record = self.sandboxes.get(sandbox_id)
        if record is None or record["state"] == "killed":
            raise Failure(404, "not_found", f"no sandbox {sandbox_id}")
        if running and record["state"] != "running":
            raise Failure(409, "conflict", f"sandbox {sandbox_id} is {record['state']}")
        return record

    def add_sandbox(self, **fields: Any) -> dict[str, Any]:
        self._next_id += 1
        record: dict[str, Any] = {
            "id": f"sbx-{self._next_id:04d}",
            "state": "running",
            "template": "base",
            "cpu": 1.0,
            "memory_mib": 512,
            "disk_mib": 1024,
            "env": {},
            "metadata": {},
            "created_at": time.time(),
            "expires_at": None,
            "error": None,
            "secret_env_keys": [],
            "on_timeout": "kill",
            "auto_park_idle": None,
            "auto_wake": False,
            "parent_id": None,
            "image_mib": 0,
        }
        record.update({key: value for key, value in fields.items() if value is not None})
        self.sandboxes[record["id"]] = record
        self.files[record["id"]] = {}
        self.processes[record["id"]] = {}
        return record

    def _refuse_secrets(self, record: dict[str, Any], action: str) -> None:
        if record["secret_env_keys"]:
            raise Failure(
                409, "secret_bearing", f"cannot {action} sandbox {record['id']}: it holds secrets"
            )

    def _snapshot_record(self, name: str) -> dict[str, Any]:
        saved = self.snapshots.get(name)
        if saved is None:
            raise Failure(404, "not_found", f"snapshot {name!r} not found")
        return saved

    def _routes(self) -> list[Route]:
        """Every (method, path pattern, handler) this fake answers; see `FakeDaemon`."""
        raise NotImplementedError
