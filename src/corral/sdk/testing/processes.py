"""The fake daemon's process routes: exec, event streams (with injected breaks), stdin, signals."""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx

from corral.sdk.testing._state import Failure, FakeProcess, FakeState, Route

__all__ = ["ProcessRoutes"]


class ProcessRoutes(FakeState):
    """Processes run at once by `self.run` (`commands.default_run`); their events stream back."""

    def processes_routes(self) -> list[Route]:
        sbx = r"/v1/sandboxes/([^/]+)"
        return [
            ("POST", sbx + r"/exec", self._exec),
            ("GET", sbx + r"/processes", self._processes),
            ("GET", sbx + r"/processes/(\d+)", self._process_info),
            ("GET", sbx + r"/processes/(\d+)/events", self._events),
            ("POST", sbx + r"/processes/(\d+)/stdin", self._stdin),
            ("POST", sbx + r"/processes/(\d+)/close-stdin", self._close_stdin),
            ("POST", sbx + r"/processes/(\d+)/signal", self._signal),
        ]

    async def _exec(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        self._sandbox(sandbox_id, running=True)
        body = json.loads(request.content)
        argv = body.get("cmd") or ["/bin/sh", "-c", body["shell"]]
        program = shlex.split(body["shell"])[0] if body.get("shell") else argv[0]
        if program == "nosuchcmd":
            raise Failure(400, "exec_failed", "nosuchcmd: command not found")
        table = self.processes[sandbox_id]
        process = FakeProcess(pid=len(table) + 100, argv=argv, request=body)
        table[process.pid] = process
        process.events.append({"seq": 0, "type": "start", "pid": process.pid})
        if body.get("stdin"):
            return httpx.Response(201, json={"pid": process.pid})
        self._finish(process)
        if body.get("background"):
            return httpx.Response(201, json={"pid": process.pid})
        return self._event_response(process, after=-1)

    def _finish(self, process: FakeProcess) -> None:
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

    def _event_response(self, process: FakeProcess, after: int) -> httpx.Response:
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

    def _process(self, sandbox_id: str, pid: str) -> FakeProcess:
        self._sandbox(sandbox_id)
        process = self.processes[sandbox_id].get(int(pid))
        if process is None:
            raise Failure(404, "not_found", f"no process {pid} in sandbox {sandbox_id}")
        return process

    @staticmethod
    def _info(process: FakeProcess) -> dict[str, Any]:
        exit = process.events[-1] if process.done else {}
        return {
            "pid": process.pid,
            "cmd": process.argv,
            "running": not process.done,
            "started_at": 0.0,
            "tag": process.request.get("tag"),
            "exit_code": exit.get("exit_code"),
            "signal": exit.get("signal"),
        }

    async def _processes(self, request: httpx.Request, sandbox_id: str) -> httpx.Response:
        self._sandbox(sandbox_id)
        listing = [self._info(p) for p in self.processes[sandbox_id].values()]
        return httpx.Response(200, json={"processes": listing})

    async def _process_info(
        self, request: httpx.Request, sandbox_id: str, pid: str
    ) -> httpx.Response:
        return httpx.Response(200, json=self._info(self._process(sandbox_id, pid)))

    async def _events(self, request: httpx.Request, sandbox_id: str, pid: str) -> httpx.Response:
        process = self._process(sandbox_id, pid)
        return self._event_response(process, after=int(request.url.params.get("after", "-1")))

    async def _stdin(self, request: httpx.Request, sandbox_id: str, pid: str) -> httpx.Response:
        process = self._process(sandbox_id, pid)
        if process.done:
            raise Failure(409, "conflict", f"process {pid} has exited")
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
