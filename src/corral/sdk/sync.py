"""The synchronous SDK: `Sandbox`, `Client`, `Files`, `Process`.

Each class wraps its async twin and runs every call on the private loop of `_portal`; no logic
lives here beyond that, so the sync and async SDKs cannot drift apart.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from typing_extensions import Unpack

from corral.sdk._content import UploadData
from corral.sdk._portal import portal
from corral.sdk._transfer import Destination, Source
from corral.sdk.client import AsyncClient
from corral.sdk.code import AsyncCode, Callback, CodeContext, Execution
from corral.sdk.files import AsyncFiles
from corral.sdk.models import (
    Capacity,
    ExecResult,
    FileInfo,
    ImportResult,
    NetworkChange,
    NetworkPolicy,
    ProcessEvent,
    ProcessInfo,
    ProjectServiceInfo,
    SandboxInfo,
    SandboxOptions,
    SecretAuditEntry,
    SecretInfo,
    SnapshotInfo,
    TemplateInfo,
    TrustedKey,
    WriteResult,
)
from corral.sdk.network import AsyncNetwork
from corral.sdk.process import AsyncProcess, EventCallback, OutputCallback
from corral.sdk.pty import Ptys
from corral.sdk.sandbox import AsyncSandbox, _Opening

__all__ = ["Client", "Files", "Process", "Sandbox"]


class Files:
    """`sandbox.files`, synchronous. See `AsyncFiles` for the semantics of each call."""

    def __init__(self, inner: AsyncFiles) -> None:
        self._async = inner

    def write(
        self, path: str, data: UploadData, *, mode: int | None = None, parents: bool = True
    ) -> WriteResult:
        return portal().call(self._async.write(path, data, mode=mode, parents=parents))

    def read(self, path: str) -> bytes:
        return portal().call(self._async.read(path))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return portal().call(self._async.read_text(path, encoding))

    def stream(self, path: str) -> Iterator[bytes]:
        return portal().iterate(self._async.stream(path))

    def download(self, path: str, local_path: str | Path) -> int:
        return portal().call(self._async.download(path, local_path))

    def upload(self, local_path: str | Path, path: str, *, mode: int | None = None) -> WriteResult:
        return portal().call(self._async.upload(local_path, path, mode=mode))

    def list(self, path: str = "/", depth: int = 1) -> builtins.list[FileInfo]:
        return portal().call(self._async.list(path, depth))

    def stat(self, path: str) -> FileInfo:
        return portal().call(self._async.stat(path))

    def exists(self, path: str) -> bool:
        return portal().call(self._async.exists(path))

    def mkdir(self, path: str, parents: bool = True) -> bool:
        return portal().call(self._async.mkdir(path, parents))

    def move(self, src: str, dst: str) -> FileInfo:
        return portal().call(self._async.move(src, dst))

    def remove(self, path: str, recursive: bool = False) -> None:
        portal().call(self._async.remove(path, recursive))


class Process:
    """A process in a sandbox, synchronous. See `AsyncProcess`."""

    def __init__(self, inner: AsyncProcess) -> None:
        self._async = inner
        self.pid = inner.pid

    def __repr__(self) -> str:
        return f"<Process {self.pid} in {self._async.sandbox.id}>"

    def info(self) -> ProcessInfo:
        return portal().call(self._async.info())

    def events(self, after: int = -1, follow: bool = True) -> Iterator[ProcessEvent]:
        return portal().iterate(self._async.events(after, follow))

    def wait(
        self,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        on_event: EventCallback | None = None,
    ) -> ExecResult:
        return portal().call(self._async.wait(on_stdout, on_stderr, on_event))

    def send_stdin(self, data: UploadData) -> None:
        portal().call(self._async.send_stdin(data))

    def close_stdin(self) -> None:
        portal().call(self._async.close_stdin())

    def signal(self, signal: str | int = "SIGTERM") -> None:
        portal().call(self._async.signal(signal))

    def kill(self) -> None:
        portal().call(self._async.kill())


class Network:
    """`sandbox.network`, synchronous. See `AsyncNetwork`."""

    def __init__(self, inner: AsyncNetwork) -> None:
        self._async = inner

    def get(self) -> NetworkPolicy:
        return portal().call(self._async.get())

    def update(
        self,
        mode: str | None = None,
        *,
        allow: Sequence[str] | None = None,
        deny: Sequence[str] | None = None,
    ) -> NetworkChange:
        return portal().call(self._async.update(mode, allow=allow, deny=deny))


class Code:
    """`sandbox.code`, synchronous. See `AsyncCode`."""

    def __init__(self, inner: AsyncCode) -> None:
        self._async = inner

    def run(self, code: str, **options: Any) -> Execution:
        return portal().call(self._async.run(code, **options))

    def create_context(self, *, language: str | None = None, cwd: str | None = None) -> CodeContext:
        return portal().call(self._async.create_context(language=language, cwd=cwd))

    def list_contexts(self) -> list[CodeContext]:
        return portal().call(self._async.list_contexts())

    def restart_context(self, context: CodeContext | str) -> None:
        portal().call(self._async.restart_context(context))

    def remove_context(self, context: CodeContext | str) -> None:
        portal().call(self._async.remove_context(context))


class Sandbox:
    """One sandbox, synchronous. `with Sandbox.create() as sbx:` kills it on exit.

    Callbacks (`on_stdout`, ...) run on the SDK's I/O thread.
    """

    def __init__(self, inner: AsyncSandbox) -> None:
        self._async = inner
        self.id = inner.id
        self.files = Files(inner.files)
        self.pty = Ptys(inner.pty)
        self.network = Network(inner.network)
        self.code = Code(inner.code)

    def __repr__(self) -> str:
        return f"<Sandbox {self.id}>"

    @classmethod
    def create(
        cls,
        template: str = "base",
        *,
        url: str | None = None,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        **options: Unpack[SandboxOptions],
    ) -> Sandbox:
        """See `AsyncSandbox.create` and `SandboxOptions` for the options."""
        opening = AsyncSandbox.create(
            template, url=url, api_key=api_key, transport=transport, **options
        )
        return cls(portal().call(_await(opening)))

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        url: str | None = None,
        api_key: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> Sandbox:
        opening = AsyncSandbox.connect(sandbox_id, url=url, api_key=api_key, transport=transport)
        return cls(portal().call(_await(opening)))

    @classmethod
    def list(
        cls,
        state: str | None = None,
        metadata: Mapping[str, str] | None = None,
        url: str | None = None,
        api_key: str | None = None,
        *,
        all: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> builtins.list[SandboxInfo]:
        return portal().call(
            AsyncSandbox.list(
                state, metadata, url=url, api_key=api_key, all=all, transport=transport
            )
        )

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        portal().call(self._async.__aexit__(exc_type, exc, tb))

    def close(self) -> None:
        portal().call(self._async.close())

    @property
    def last_info(self) -> SandboxInfo:
        """The info the daemon last gave (no round trip; `info()` refreshes it)."""
        return self._async.last_info

    def info(self) -> SandboxInfo:
        return portal().call(self._async.info())

    def kill(self) -> None:
        portal().call(self._async.kill())

    def park(self) -> SandboxInfo:
        return portal().call(self._async.park())

    def wake(self) -> SandboxInfo:
        return portal().call(self._async.wake())

    def fork(self, count: int = 1) -> builtins.list[Sandbox]:
        return [Sandbox(child) for child in portal().call(self._async.fork(count))]

    def snapshot(
        self, name: str, *, fs_only: bool = False, allow_secrets: bool = False
    ) -> SnapshotInfo:
        return portal().call(
            self._async.snapshot(name, fs_only=fs_only, allow_secrets=allow_secrets)
        )

    def export(self, destination: Destination) -> int:
        return portal().call(self._async.export(destination))

    def exec(
        self,
        cmd: str | Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        timeout: float | None = None,
        stdin: UploadData | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        *,
        on_event: EventCallback | None = None,
    ) -> ExecResult:
        return portal().call(
            self._async.exec(
                cmd,
                env=env,
                cwd=cwd,
                user=user,
                timeout=timeout,
                stdin=stdin,
                on_stdout=on_stdout,
                on_stderr=on_stderr,
                on_event=on_event,
            )
        )

    def run_code(
        self,
        code: str,
        language: str | None = None,
        context: CodeContext | str | None = None,
        on_stdout: Callback | None = None,
        on_stderr: Callback | None = None,
        on_result: Callback | None = None,
        on_error: Callback | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Execution:
        """Run code in the sandbox's code interpreter; see `AsyncCode.run`. Callbacks run on
        the SDK's I/O thread."""
        return portal().call(
            self._async.run_code(
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
        )

    def exec_background(
        self,
        cmd: str | Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        timeout: float | None = None,
        stdin: bool = False,
        tag: str | None = None,
    ) -> Process:
        inner = portal().call(
            self._async.exec_background(
                cmd, env=env, cwd=cwd, user=user, timeout=timeout, stdin=stdin, tag=tag
            )
        )
        return Process(inner)

    def processes(self) -> builtins.list[ProcessInfo]:
        return portal().call(self._async.processes())

    def process(self, pid: int) -> Process:
        return Process(self._async.process(pid))


class Client:
    """The connection to one daemon, synchronous. See `AsyncClient`."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._async = AsyncClient(url, api_key, transport=transport)
        self.url = self._async.url

    def __repr__(self) -> str:
        return f"<Client {self.url}>"

    def close(self) -> None:
        portal().call(self._async.aclose())

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def health(self) -> bool:
        return portal().call(self._async.health())

    def capacity(self) -> Capacity:
        return portal().call(self._async.capacity())

    def console_login_link(self) -> str:
        return portal().call(self._async.console_login_link())

    def templates(self) -> list[TemplateInfo]:
        return portal().call(self._async.templates())

    def get_template(self, name: str) -> TemplateInfo:
        return portal().call(self._async.get_template(name))

    def recipes(self) -> list[dict[str, Any]]:
        return portal().call(self._async.recipes())

    def delete_template(self, name: str) -> None:
        portal().call(self._async.delete_template(name))

    def create_template(
        self,
        name: str,
        *,
        image: str | None = None,
        warmup: str | None = None,
        warm: bool = False,
        cpu: float | None = None,
        memory_mib: int | None = None,
    ) -> TemplateInfo:
        return portal().call(
            self._async.create_template(
                name, image=image, warmup=warmup, warm=warm, cpu=cpu, memory_mib=memory_mib
            )
        )

    def list_sandboxes(
        self,
        state: str | None = None,
        metadata: Mapping[str, str] | None = None,
        *,
        all: bool = False,
    ) -> list[SandboxInfo]:
        return portal().call(self._async.list_sandboxes(state, metadata, all=all))

    def create_sandbox(self, template: str = "base", **options: Unpack[SandboxOptions]) -> Sandbox:
        inner = portal().call(self._async.create_sandbox(template, **options))
        return Sandbox(inner)

    def connect(self, sandbox_id: str) -> Sandbox:
        return Sandbox(portal().call(self._async.connect(sandbox_id)))

    def sandbox(self, sandbox_id: str) -> Sandbox:
        return Sandbox(self._async.sandbox(sandbox_id))

    def snapshots(self) -> list[SnapshotInfo]:
        return portal().call(self._async.snapshots())

    def get_snapshot(self, name: str) -> SnapshotInfo:
        return portal().call(self._async.get_snapshot(name))

    def remove_snapshot(self, name: str) -> None:
        portal().call(self._async.remove_snapshot(name))

    def export_sandbox(self, sandbox_id: str, destination: Destination) -> int:
        return portal().call(self._async.export_sandbox(sandbox_id, destination))

    def export_snapshot(self, name: str, destination: Destination) -> int:
        return portal().call(self._async.export_snapshot(name, destination))

    def import_file(self, source: Source, *, fs_only: bool = False) -> ImportResult:
        return portal().call(self._async.import_file(source, fs_only=fs_only))

    def workspace_public_key(self) -> str:
        return portal().call(self._async.workspace_public_key())

    def trusted_keys(self) -> list[TrustedKey]:
        return portal().call(self._async.trusted_keys())

    def trust_key(self, name: str, public_key: str) -> TrustedKey:
        return portal().call(self._async.trust_key(name, public_key))

    def untrust_key(self, name: str) -> None:
        portal().call(self._async.untrust_key(name))

    def services(self) -> builtins.list[ProjectServiceInfo]:
        return portal().call(self._async.services())

    def add_service(self, name: str, target: str) -> ProjectServiceInfo:
        return portal().call(self._async.add_service(name, target))

    def remove_service(self, name: str) -> None:
        portal().call(self._async.remove_service(name))

    def secrets(self) -> builtins.list[SecretInfo]:
        return portal().call(self._async.secrets())

    def set_secret(
        self,
        name: str,
        value: str,
        *,
        preset: str = "http",
        hosts: Sequence[str] | None = None,
        header: str | None = None,
        scheme: str | None = None,
        query: bool | None = None,
        body: bool | None = None,
    ) -> SecretInfo:
        return portal().call(
            self._async.set_secret(
                name,
                value,
                preset=preset,
                hosts=hosts,
                header=header,
                scheme=scheme,
                query=query,
                body=body,
            )
        )

    def rotate_secret(self, name: str, value: str) -> SecretInfo:
        return portal().call(self._async.rotate_secret(name, value))

    def remove_secret(self, name: str) -> None:
        portal().call(self._async.remove_secret(name))

    def revoke_secret(self, sandbox_id: str, name: str) -> None:
        portal().call(self._async.revoke_secret(sandbox_id, name))

    def secret_log(
        self, secret: str | None = None, sandbox_id: str | None = None, limit: int = 100
    ) -> builtins.list[SecretAuditEntry]:
        return portal().call(self._async.secret_log(secret, sandbox_id, limit))


async def _await(opening: _Opening) -> AsyncSandbox:
    return await opening
