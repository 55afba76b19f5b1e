"""`AsyncSandbox`: one sandbox, the async core the sync `Sandbox` wraps.

A handle holds the sandbox id, the last info the daemon gave, and the client it talks through.
`create`/`connect` build their own client (closed with the sandbox) unless one is passed;
`AsyncClient.create_sandbox` shares the client's connection pool instead.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import anyio
import httpx
from typing_extensions import Unpack

from corral.sdk._content import UploadData
from corral.sdk._exec_wire import OutputCollector, build_exec_body
from corral.sdk._transfer import Destination, download
from corral.sdk.code import AsyncCode, Callback, CodeContext, Execution
from corral.sdk.errors import ConnectionFailed, CorralError, NotFound
from corral.sdk.files import AsyncFiles
from corral.sdk.models import (
    ExecResult,
    ProcessInfo,
    SandboxInfo,
    SandboxMetrics,
    SandboxOptions,
    SnapshotInfo,
)
from corral.sdk.network import AsyncNetwork
from corral.sdk.ports import AsyncPorts
from corral.sdk.process import (
    AsyncProcess,
    EventCallback,
    OutputCallback,
    stream_exec,
)
from corral.sdk.pty import AsyncPtys

if TYPE_CHECKING:
    from corral.sdk._http import HTTPSession
    from corral.sdk.client import AsyncClient

__all__ = ["AsyncSandbox"]


class _Opening:
    """What `AsyncSandbox.create`/`connect` return: await it, or use it in `async with`."""

    def __init__(self, open_sandbox: Callable[[], Awaitable[AsyncSandbox]]) -> None:
        self._open = open_sandbox
        self._sandbox: AsyncSandbox | None = None

    def __await__(self) -> Generator[Any, None, AsyncSandbox]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncSandbox:
        self._sandbox = await self._open()
        return await self._sandbox.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._sandbox is not None:
            await self._sandbox.__aexit__(exc_type, exc, tb)


class AsyncSandbox:
    """One sandbox. `async with` kills it (and closes a client it owns) on exit."""

    def __init__(self, client: AsyncClient, info: SandboxInfo, *, owns_client: bool = False):
        self.client = client
        self.id = info.id
        self._info = info
        self._owns_client = owns_client
        self.files = AsyncFiles(self)
        self.pty = AsyncPtys(self)
        self.network = AsyncNetwork(self)
        self.code = AsyncCode(self)
        self.ports = AsyncPorts(self)

    def __repr__(self) -> str:
        return f"<AsyncSandbox {self.id} {self._info.state}>"

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        template: str = "base",
        *,
        url: str | None = None,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        **options: Unpack[SandboxOptions],
    ) -> _Opening:
        """Make a new sandbox: `sbx = await AsyncSandbox.create()` or
        `async with AsyncSandbox.create() as sbx:` (or `async with await ...`).
        The options (cpu, memory_mib, env, snapshot, secret_env, ...) are `SandboxOptions`."""

        async def open_sandbox() -> AsyncSandbox:
            client = _own_client(url, api_key, transport)
            try:
                info = await client.create_sandbox_info(template, **options)
            except BaseException:
                await client.aclose()
                raise
            return cls(client, info, owns_client=True)

        return _Opening(open_sandbox)

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        *,
        url: str | None = None,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> _Opening:
        """A handle on an existing sandbox (raises `NotFound` if there is none)."""

        async def open_sandbox() -> AsyncSandbox:
            client = _own_client(url, api_key, transport)
            try:
                info = await client.get_sandbox_info(sandbox_id)
            except BaseException:
                await client.aclose()
                raise
            return cls(client, info, owns_client=True)

        return _Opening(open_sandbox)

    @classmethod
    async def list(
        cls,
        state: str | None = None,
        metadata: Mapping[str, str] | None = None,
        *,
        url: str | None = None,
        api_key: str | None = None,
        all: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> builtins.list[SandboxInfo]:
        """Live sandboxes; with ``all`` also ended ones the daemon still has records of."""
        async with _own_client(url, api_key, transport) as client:
            return await client.list_sandboxes(state=state, metadata=metadata, all=all)

    async def close(self) -> None:
        """Release the HTTP connections of a client this handle owns (the sandbox keeps running)."""
        if self._owns_client:
            await self.client.aclose()

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            with anyio.CancelScope(shield=True):
                await self.kill()
        except (NotFound, ConnectionFailed):
            if exc is None:
                raise
        finally:
            await self.close()

    @property
    def last_info(self) -> SandboxInfo:
        """The info the daemon last gave (no round trip; `info()` refreshes it)."""
        return self._info

    # -- plumbing shared with files and processes ---------------------------------------------

    @property
    def session(self) -> HTTPSession:
        return self.client.session

    @property
    def path(self) -> str:
        return f"/v1/sandboxes/{quote(self.id, safe='')}"

    # -- lifecycle ----------------------------------------------------------------------------

    async def info(self) -> SandboxInfo:
        self._info = SandboxInfo.from_wire(await self.session.json("GET", self.path))
        return self._info

    async def metrics(self) -> SandboxMetrics:
        """Its cpu, memory and disk use now (a running sandbox; else `Conflict`)."""
        return SandboxMetrics.from_wire(await self.session.json("GET", f"{self.path}/metrics"))

    async def kill(self) -> None:
        """Kill the sandbox; a sandbox that is already gone is not an error."""
        try:
            await self.session.request("DELETE", self.path)
        except NotFound:
            return

    async def park(self) -> SandboxInfo:
        """Checkpoint memory and filesystem to disk and free the CPU/RAM reservation."""
        return await self._transition("park")

    async def wake(self) -> SandboxInfo:
        """Restore a parked sandbox, same id, its processes still running."""
        return await self._transition("wake")

    async def _transition(self, action: str) -> SandboxInfo:
        answer = await self.session.json("POST", f"{self.path}/{action}")
        if isinstance(answer, dict) and "id" in answer:
            self._info = SandboxInfo.from_wire(answer)
            return self._info
        return await self.info()

    async def fork(self, count: int = 1) -> builtins.list[AsyncSandbox]:
        """`count` new sandboxes continuing from this one's current state, processes included;
        this one keeps running. They share this handle's client."""
        answer = await self.session.json("POST", f"{self.path}/fork", json_body={"count": count})
        return [
            AsyncSandbox(self.client, SandboxInfo.from_wire(item))
            for item in answer.get("sandboxes", [])
        ]

    async def snapshot(
        self, name: str, *, fs_only: bool = False, allow_secrets: bool = False
    ) -> SnapshotInfo:
        """Save this sandbox's state under `name`; `create(snapshot=name)` restores from it.

        A memory snapshot (the default) keeps running processes; `fs_only` keeps files only.
        A secret-bearing sandbox allows only `fs_only`, and only with `allow_secrets`."""
        body: dict[str, Any] = {"name": name}
        if fs_only:
            body["fs_only"] = True
        if allow_secrets:
            body["allow_secrets"] = True
        answer = await self.session.json("POST", f"{self.path}/snapshots", json_body=body)
        return SnapshotInfo.from_wire(answer)

    async def export(self, destination: Destination) -> int:
        """Write this parked sandbox as one checksummed file (a path or a binary file object),
        streamed; `AsyncClient.import_file` on another host brings it back. Returns the bytes."""
        return await download(self.session, f"{self.path}/export", destination)

    # -- processes ----------------------------------------------------------------------------

    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        timeout: float | None = None,
        stdin: UploadData | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        on_event: EventCallback | None = None,
    ) -> ExecResult:
        """Run a command to its end. A str runs through the shell, a list is the argv.

        `on_stdout`/`on_stderr` get decoded text as it streams; `on_event` gets every raw
        `ProcessEvent` (bytes included). `stdin` (bytes, str, a file or an iterator) is sent
        and then closed. `timeout` is enforced by the daemon; the result says `timed_out`.
        """
        collector = OutputCollector(on_stdout, on_stderr, on_event)
        if stdin is None:
            body = build_exec_body(cmd, env=env, cwd=cwd, user=user, timeout=timeout)
            events = stream_exec(self.session, self.path, body)
            try:
                async for event in events:
                    await collector.feed(event)
            finally:
                await events.aclose()  # type: ignore[attr-defined]
            return collector.result()
        process = await self.exec_background(
            cmd, env=env, cwd=cwd, user=user, timeout=timeout, stdin=True
        )
        return await _feed_and_wait(process, stdin, collector)

    async def exec_background(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        timeout: float | None = None,
        stdin: bool = False,
        tag: str | None = None,
    ) -> AsyncProcess:
        """Start a command and return at once with its `AsyncProcess` handle."""
        body = build_exec_body(
            cmd, env=env, cwd=cwd, user=user, timeout=timeout, stdin=stdin, background=True, tag=tag
        )
        answer = await self.session.json("POST", f"{self.path}/exec", json_body=body)
        return AsyncProcess(self, int(answer["pid"]))

    async def run_code(
        self,
        code: str,
        *,
        language: str | None = None,
        context: CodeContext | str | None = None,
        on_stdout: Callback | None = None,
        on_stderr: Callback | None = None,
        on_result: Callback | None = None,
        on_error: Callback | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Execution:
        """Run code in the sandbox's code interpreter (a template built `--with
        code-interpreter`); state stays between calls. See `AsyncCode.run`."""
        return await self.code.run(
            code,
            language=language,
            context=context,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            on_result=on_result,
            on_error=on_error,
            env=env,
            timeout=timeout,
        )

    async def processes(self) -> builtins.list[ProcessInfo]:
        answer = await self.session.json("GET", f"{self.path}/processes")
        return [ProcessInfo.from_wire(item) for item in answer.get("processes", [])]

    def process(self, pid: int) -> AsyncProcess:
        """A handle on an existing process (no round trip)."""
        return AsyncProcess(self, pid)


async def _feed_and_wait(
    process: AsyncProcess, stdin: UploadData, collector: OutputCollector
) -> ExecResult:
    """Send stdin while following the output, so a command that answers line by line works.
    A stdin failure after the process has exited is not an error (it stopped reading)."""
    stdin_error: CorralError | None = None

    async def feed_stdin() -> None:
        nonlocal stdin_error
        try:
            await process.send_stdin(stdin)
            await process.close_stdin()
        except CorralError as exc:
            stdin_error = exc

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(feed_stdin)
        events = process.events()
        try:
            async for event in events:
                await collector.feed(event)
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        tasks.cancel_scope.cancel()
    if collector.exit is None and stdin_error is not None:
        raise stdin_error
    return collector.result()


def _own_client(
    url: str | None, api_key: str | None, transport: httpx.AsyncBaseTransport | None
) -> AsyncClient:
    from corral.sdk.client import AsyncClient

    return AsyncClient(url=url, api_key=api_key, transport=transport)
