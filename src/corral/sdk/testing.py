"""`FakeDaemon`: an in-memory stand-in for the corral daemon, for tests of code that uses the SDK.

It speaks the v1 HTTP API (docs/api.md) through an `httpx.MockTransport`, so no socket is opened:

    fake = FakeDaemon()
    sbx = Sandbox.create(api_key=fake.api_key, transport=fake.transport)

Commands do not run anywhere; `FakeDaemon.run` answers them (`echo`, `cat`, `true`, `false`,
`exit N`, `sleep N`, `python3 -c`/`bash -c` echo their code) and tests may replace it. Faults
are injected by `break_streams_after` (a stream breaks once after N events, like a daemon
restart) and `fail_next` (the next request answers with an error).
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

__all__ = ["CommandOutcome", "FakeDaemon"]


@dataclass
class CommandOutcome:
    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int | None = 0
    timed_out: bool = False


@dataclass
class _Process:
    pid: int
    argv: list[str]
    request: dict[str, Any]
    stdin: bytearray = field(default_factory=bytearray)
    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False


class _Failure(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class FakeDaemon:
    """An in-memory daemon. State is public so tests can arrange and assert on it."""

    def __init__(self, api_key: str = "test-key") -> None:
        self.api_key = api_key
        self.sandboxes: dict[str, dict[str, Any]] = {}
        self.files: dict[str, dict[str, bytes]] = {}
        self.processes: dict[str, dict[int, _Process]] = {}
        self.snapshots: dict[str, dict[str, Any]] = {}
        self.requests: list[httpx.Request] = []
        self.break_streams_after: int | None = None
        self.fail_next: tuple[int, str, str] | None = None
        self.run: Callable[[list[str], bytes, float | None], CommandOutcome] = default_run
        self._next_id = 0
        self.transport = httpx.MockTransport(self._handle)

    # -- dispatch -----------------------------------------------------------------------------

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        await request.aread()
        try:
            if request.url.path == "/healthz":
                return httpx.Response(200, json={"ok": True})
            if request.headers.get("authorization") != f"Bearer {self.api_key}":
                raise _Failure(401, "unauthorized", "missing or wrong API key")
            if self.fail_next is not None:
                status, code, message = self.fail_next
                self.fail_next = None
                raise _Failure(status, code, message)
            for method, pattern, handler in self._routes():
                match = re.fullmatch(pattern, request.url.path)
                if match and request.method == method:
                    result: httpx.Response = await handler(request, *match.groups())
                    return result
            raise _Failure(404, "not_found", f"no route {request.method} {request.url.path}")
        except _Failure as failure:
            body = {"code": failure.code, "message": failure.message}
            return httpx.Response(failure.status, json=body)

    def _routes(self) -> list[tuple[str, str, Callable[..., Any]]]:
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
            ("POST", sbx + r"/snapshots", self._snapshot),
            ("GET", sbx + r"/export", self._export_sandbox),
            ("GET", r"/v1/snapshots", self._list_snapshots),
            ("GET", r"/v1/snapshots/([^/]+)", self._get_snapshot),
            ("DELETE", r"/v1/snapshots/([^/]+)", self._remove_snapshot),
            ("GET", r"/v1/snapshots/([^/]+)/export", self._export_snapshot),
            ("POST", r"/v1/import", self._import),
            ("POST", sbx + r"/exec", self._exec),
            ("GET", sbx + r"/processes", self._processes),
            ("GET", sbx + r"/processes/(\d+)/events", self._events),
            ("POST", sbx + r"/processes/(\d+)/stdin", self._stdin),
            ("POST", sbx + r"/processes/(\d+)/close-stdin", self._close_stdin),
            ("POST", sbx + r"/processes/(\d+)/signal", self._signal),
            ("GET", sbx + r"/files/content", self._read),
            ("PUT", sbx + r"/files/content", self._write),
            ("GET", sbx + r"/files/stat", self._stat),
            ("GET", sbx + r"/files/list", self._listdir),
            ("POST", sbx + r"/files/mkdir", self._mkdir),
            ("POST", sbx + r"/files/move", self._move),
            ("DELETE", sbx + r"/files", self._remove),
        ]

    def _sandbox(self, sandbox_id: str, *, running: bool = False) -> dict[str, Any]:
        record = self.sandboxes.get(sandbox_id)
        if record is None or record["state"] == "killed":
            raise _Failure(404, "not_found", f"no sandbox {sandbox_id}")
        if running and record["state"] != "running":
            raise _Failure(409, "conflict", f"sandbox {sandbox_id} is {record['state']}")
        return record

    # -- workspace and sandboxes --------------------------------------------------------------

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

    async def _create(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body.get("template", "base") != "base":
            raise _Failure(404, "not_found", f"no template {body['template']}")
        if (body.get("memory_mib") or 0) > 8192:
            raise _Failure(409, "capacity", "memory_mib 9000 is over the free 7680 MiB by 1320")
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
            raise _Failure(
                409, "conflict", f"cannot {action} sandbox {sandbox_id} in state {record['state']}"
            )
        record["state"] = to
        return httpx.Response(200, json=record)

    def _refuse_secrets(self, record: dict[str, Any], action: str) -> None:
        if record["secret_env_keys"]:
            raise _Failure(
                409, "secret_bearing", f"cannot {action} sandbox {record['id']}: it holds secrets"
            )

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

    # -- snapshots and transfer ---------------------------------------------------------------

    def _snapshot_record(self, name: str) -> dict[str, Any]:
        saved = self.snapshots.get(name)
        if saved is None:
            raise _Failure(404, "not_found", f"snapshot {name!r} not found")
        return saved

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
            raise _Failure(409, "conflict", f"snapshot {name!r} already exists")
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
            raise _Failure(409, "conflict", f"cannot export sandbox {sandbox_id}: park it first")
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
            raise _Failure(400, "invalid", f"the export is damaged or truncated: {exc}") from exc
        if kind == "snapshot":
            self.snapshots[record["name"]] = {**record, "files": files}
            return httpx.Response(201, json={"kind": "snapshot", "snapshot": record})
        made = self.add_sandbox(**{k: v for k, v in record.items() if k != "id"})
        self.files[made["id"]] = files
        return httpx.Response(201, json={"kind": "sandbox", "sandbox": made})

    # -- processes ----------------------------------------------------------------------------

    async def _exec(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        self._sandbox(sandbox_id, running=True)
        body = json.loads(request.content)
        argv = body.get("cmd") or ["/bin/sh", "-c", body["shell"]]
        program = shlex.split(body["shell"])[0] if body.get("shell") else argv[0]
        if program == "nosuchcmd":
            raise _Failure(400, "exec_failed", "nosuchcmd: command not found")
        table = self.processes[sandbox_id]
        process = _Process(pid=len(table) + 100, argv=argv, request=body)
        table[process.pid] = process
        process.events.append({"seq": 0, "type": "start", "pid": process.pid})
        if body.get("stdin"):
            return httpx.Response(201, json={"pid": process.pid})
        self._finish(process)
        if body.get("background"):
            return httpx.Response(201, json={"pid": process.pid})
        return self._event_response(process, after=-1)

    def _finish(self, process: _Process) -> None:
        outcome = self.run(process.argv, bytes(process.stdin), process.request.get("timeout"))
        for kind, data in (("stdout", outcome.stdout), ("stderr", outcome.stderr)):
            # Split output in two events so clients see more than one chunk.
            half = len(data) // 2
            for part in (data[:half], data[half:]):
                if part:
                    encoded = base64.b64encode(part).decode()
                    process.events.append(
                        {"seq": len(process.events), "type": kind, "data": encoded}
                    )
        process.events.append(
            {
                "seq": len(process.events),
                "type": "exit",
                "exit_code": None if outcome.timed_out else outcome.exit_code,
                "signal": 9 if outcome.timed_out else None,
                "timed_out": outcome.timed_out,
            }
        )
        process.done = True

    def _event_response(self, process: _Process, after: int) -> httpx.Response:
        break_after, self.break_streams_after = self.break_streams_after, None

        async def lines() -> AsyncIterator[bytes]:
            sent = 0
            index = after + 1
            while True:
                while index < len(process.events):
                    if break_after is not None and sent >= break_after:
                        raise httpx.ReadError("connection reset by the fake daemon")
                    yield (json.dumps(process.events[index]) + "\n").encode()
                    index += 1
                    sent += 1
                if process.done and index >= len(process.events):
                    return
                await anyio.sleep(0.005)

        return httpx.Response(
            200, headers={"content-type": "application/x-ndjson"}, content=lines()
        )

    def _process(self, sandbox_id: str, pid: str) -> _Process:
        self._sandbox(sandbox_id)
        process = self.processes[sandbox_id].get(int(pid))
        if process is None:
            raise _Failure(404, "not_found", f"no process {pid} in sandbox {sandbox_id}")
        return process

    async def _processes(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        self._sandbox(sandbox_id)
        listing = [
            {"pid": p.pid, "cmd": p.argv, "running": not p.done, "started_at": 0.0}
            for p in self.processes[sandbox_id].values()
        ]
        return httpx.Response(200, json={"processes": listing})

    async def _events(self, request: httpx.Request, sandbox_id: str, pid: str) -> httpx.Response:
        process = self._process(sandbox_id, pid)
        return self._event_response(process, after=int(request.url.params.get("after", "-1")))

    async def _stdin(self, request: httpx.Request, sandbox_id: str, pid: str) -> httpx.Response:
        process = self._process(sandbox_id, pid)
        if process.done:
            raise _Failure(409, "conflict", f"process {pid} has exited")
        process.stdin += request.content
        return httpx.Response(204)

    async def _close_stdin(
        self, request: httpx.Request, sandbox_id: str, pid: str
    ) -> httpx.Response:
        process = self._process(sandbox_id, pid)
        if not process.done:
            self._finish(process)
        return httpx.Response(204)

    async def _signal(self, request: httpx.Request, sandbox_id: str, pid: str) -> httpx.Response:
        process = self._process(sandbox_id, pid)
        if not process.done:
            seq = len(process.events)
            process.events.append(
                {"seq": seq, "type": "exit", "exit_code": None, "signal": 9, "timed_out": False}
            )
            process.done = True
        return httpx.Response(204)

    # -- files --------------------------------------------------------------------------------

    async def _read(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        path = request.url.params["path"]
        data = self._files(sandbox_id).get(path)
        if data is None:
            raise _Failure(404, "not_found", f"no file {path}")

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(data), 4096):
                yield data[start : start + 4096]

        return httpx.Response(200, content=chunks())

    async def _write(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        path = request.url.params["path"]
        self._files(sandbox_id)[path] = request.content
        return httpx.Response(200, json={"path": path, "size": len(request.content)})

    def _files(self, sandbox_id: str) -> dict[str, bytes]:
        self._sandbox(sandbox_id)
        return self.files[sandbox_id]

    def _entry(self, path: str, data: bytes | None) -> dict[str, Any]:
        kind, size, mode = ("dir", 4096, 0o755) if data is None else ("file", len(data), 0o644)
        name = path.rstrip("/").rsplit("/", 1)[-1]
        return {"name": name, "path": path, "type": kind, "size": size, "mode": mode, "mtime": 0.0}

    async def _stat(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        path = request.url.params["path"]
        files = self._files(sandbox_id)
        if path in files:
            return httpx.Response(200, json=self._entry(path, files[path]))
        if path == "/" or any(name.startswith(path.rstrip("/") + "/") for name in files):
            return httpx.Response(200, json=self._entry(path, None))
        raise _Failure(404, "not_found", f"no file {path}")

    async def _listdir(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        prefix = request.url.params["path"].rstrip("/") + "/"
        entries = []
        children: set[str] = set()
        for name, data in sorted(self._files(sandbox_id).items()):
            if name.startswith(prefix):
                rest = name[len(prefix) :]
                child = rest.split("/", 1)[0]
                if child in children:
                    continue
                children.add(child)
                is_file = "/" not in rest
                entries.append(self._entry(prefix + child, data if is_file else None))
        return httpx.Response(200, json={"entries": entries})

    async def _mkdir(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        path = json.loads(request.content)["path"]
        files = self._files(sandbox_id)
        marker = path.rstrip("/") + "/.keep"
        created = marker not in files
        files.setdefault(marker, b"")
        return httpx.Response(200, json={"created": created})

    async def _move(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        body = json.loads(request.content)
        files = self._files(sandbox_id)
        if body["src"] not in files:
            raise _Failure(404, "not_found", f"no file {body['src']}")
        files[body["dst"]] = files.pop(body["src"])
        return httpx.Response(200, json=self._entry(body["dst"], files[body["dst"]]))

    async def _remove(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        path = request.url.params["path"]
        files = self._files(sandbox_id)
        if files.pop(path, None) is None:
            raise _Failure(404, "not_found", f"no file {path}")
        return httpx.Response(204)


def default_run(argv: list[str], stdin: bytes, timeout: float | None) -> CommandOutcome:
    """A tiny command interpreter for the fake: enough for tests to see output and exit codes."""
    if argv[:2] == ["/bin/sh", "-c"]:
        argv = shlex.split(argv[2])
    program, args = argv[0], argv[1:]
    if program == "echo":
        return CommandOutcome(stdout=(" ".join(args) + "\n").encode())
    if program == "cat":
        return CommandOutcome(stdout=stdin)
    if program in ("true", "false"):
        return CommandOutcome(exit_code=0 if program == "true" else 1)
    if program == "exit":
        return CommandOutcome(exit_code=int(args[0]) if args else 0)
    if program == "sleep":
        timed_out = timeout is not None and float(args[0]) > timeout
        return CommandOutcome(timed_out=timed_out)
    if program in ("python3", "bash", "sh") and args[:1] == ["-c"]:
        return CommandOutcome(stdout=f"{program} ran: {args[1]}".encode())
    return CommandOutcome(stderr=f"{program}: not in the fake's repertoire\n".encode(), exit_code=2)
