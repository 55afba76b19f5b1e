"""Terminals in a sandbox (`sbx.pty`): a command on a pseudo-terminal, its output, input, resize.

A terminal is a process of the sandbox (`pty: true` in `sbx.processes()`) started on a new
pseudo-terminal; its output (one stream: the terminal's) is buffered in the sandbox like any
process's, so `connect(pid)` reattaches after a disconnect and replays what is still buffered.
Input goes through the terminal's line discipline: `send(b"\\x03")` is a Ctrl-C.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING

from corral.sdk.models import ProcessInfo
from corral.sdk.process import follow_events

if TYPE_CHECKING:
    from corral.sdk.sandbox import AsyncSandbox

__all__ = ["AsyncPty", "AsyncPtys"]


class AsyncPty:
    """One terminal: `send`, `resize`, `kill`, and `async for data in pty` for its output.

    Iterating continues where the last iteration stopped (a new handle from `connect` starts
    at the beginning of what is buffered) and ends when the command exits; `exit_code` is then
    set (128 + the signal number when a signal ended it).
    """

    def __init__(self, sandbox: AsyncSandbox, pid: int) -> None:
        self.sandbox = sandbox
        self.pid = pid
        self.exit_code: int | None = None
        self._after = -1

    def __repr__(self) -> str:
        return f"<AsyncPty {self.pid} in {self.sandbox.id}>"

    @property
    def _path(self) -> str:
        return f"{self.sandbox.path}/processes/{self.pid}"

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.output()

    async def output(self) -> AsyncIterator[bytes]:
        """The terminal's output bytes as they come, until the command exits."""
        if self.exit_code is not None:
            return
        events = follow_events(self.sandbox.session, self.sandbox.path, self.pid, self._after)
        try:
            async for event in events:
                self._after = event.seq
                if event.type == "stdout" and event.data:
                    yield event.data
                elif event.type == "exit":
                    code = event.exit_code
                    if code is None:
                        code = 128 + event.signal if event.signal is not None else -1
                    self.exit_code = code
                    return
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    async def wait(self) -> int:
        """Read the output to the command's exit (discarding it); return its exit code."""
        async for _ in self.output():
            pass
        assert self.exit_code is not None
        return self.exit_code

    async def send(self, data: bytes | str) -> None:
        """Type `data` into the terminal (a str is sent as UTF-8)."""
        payload = data.encode() if isinstance(data, str) else data
        await self.sandbox.session.request("POST", f"{self._path}/stdin", content=payload)

    async def resize(self, rows: int, cols: int) -> None:
        await self.sandbox.session.request(
            "POST", f"{self._path}/resize", json_body={"rows": rows, "cols": cols}
        )

    async def kill(self) -> None:
        """SIGKILL the terminal's process group."""
        await self.sandbox.session.request(
            "POST", f"{self._path}/signal", json_body={"signal": "SIGKILL"}
        )

    async def info(self) -> ProcessInfo:
        return ProcessInfo.from_wire(await self.sandbox.session.json("GET", self._path))


class AsyncPtys:
    """`sbx.pty`: open terminals and reattach to them."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    async def create(
        self,
        rows: int = 24,
        cols: int = 80,
        cmd: Sequence[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        tag: str | None = None,
    ) -> AsyncPty:
        """Start `cmd` (default: the sandbox user's login shell) on a `rows` x `cols` terminal
        (TERM=xterm-256color unless `env` says otherwise)."""
        body: dict[str, object] = {"rows": rows, "cols": cols, "env": dict(env or {})}
        if cmd is not None:
            body["cmd"] = list(cmd)
        for key, value in (("cwd", cwd), ("user", user), ("tag", tag)):
            if value is not None:
                body[key] = value
        answer = await self._sandbox.session.json(
            "POST", f"{self._sandbox.path}/pty", json_body=body
        )
        return AsyncPty(self._sandbox, int(answer["pid"]))

    def connect(self, pid: int) -> AsyncPty:
        """A handle on an existing terminal; its output replays from what is still buffered."""
        return AsyncPty(self._sandbox, pid)
