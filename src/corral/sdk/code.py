"""`sandbox.run_code` and `sandbox.code`: the stateful code interpreter of a sandbox.

Sandboxes of templates built `--with code-interpreter` run Jupyter kernels behind E2B's
code-interpreter protocol; these calls speak it through the daemon
(`/v1/sandboxes/{id}/code/...`). The models match `e2b_code_interpreter`'s: an `Execution`
holds `results` (each with its formats: `text`, `html`, `png` as base64, ...), `logs` (stdout
and stderr chunks), `error` (`name`, `value`, `traceback`) and `execution_count`.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from corral.sdk.sandbox import AsyncSandbox

__all__ = [
    "AsyncCode",
    "CodeContext",
    "Execution",
    "ExecutionError",
    "Logs",
    "OutputMessage",
    "Result",
]

_FORMATS = (
    "text",
    "html",
    "markdown",
    "svg",
    "png",
    "jpeg",
    "pdf",
    "latex",
    "json",
    "javascript",
    "data",
)


@dataclass
class OutputMessage:
    """One chunk of stdout or stderr as it was printed (`timestamp`: Unix ns)."""

    line: str
    timestamp: int
    error: bool = False

    def __str__(self) -> str:
        return self.line


@dataclass
class Result:
    """One displayed value: the cell's last expression (`is_main_result`) or a display call
    (a plot). Each format present is set; images are base64 text."""

    text: str | None = None
    html: str | None = None
    markdown: str | None = None
    svg: str | None = None
    png: str | None = None
    jpeg: str | None = None
    pdf: str | None = None
    latex: str | None = None
    json: Any = None
    javascript: str | None = None
    data: Any = None
    extra: dict[str, Any] | None = None
    is_main_result: bool = False

    @classmethod
    def from_wire(cls, event: Mapping[str, Any]) -> Result:
        known = {k: event.get(k) for k in _FORMATS}
        return cls(
            **known, extra=event.get("extra"), is_main_result=bool(event.get("is_main_result"))
        )

    def formats(self) -> builtins.list[str]:
        found = [k for k in _FORMATS if getattr(self, k) is not None]
        return found + list(self.extra or {})


@dataclass
class ExecutionError:
    """An error the code raised (or a timeout: `name == "TimeoutError"`)."""

    name: str
    value: str
    traceback: str


@dataclass
class Logs:
    stdout: builtins.list[str] = field(default_factory=list)
    stderr: builtins.list[str] = field(default_factory=list)


@dataclass
class Execution:
    results: builtins.list[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: ExecutionError | None = None
    execution_count: int | None = None

    @property
    def text(self) -> str | None:
        """The text of the main result (the last expression's value), if there is one."""
        for result in self.results:
            if result.is_main_result:
                return result.text
        return None


@dataclass(frozen=True)
class CodeContext:
    """A context: its own kernel, state, language and working directory."""

    id: str
    language: str
    cwd: str

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> CodeContext:
        return cls(id=str(data["id"]), language=str(data["language"]), cwd=str(data["cwd"]))


Callback = Callable[[Any], Any | Awaitable[Any]]


async def _call(callback: Callback | None, value: Any) -> None:
    if callback is not None:
        outcome = callback(value)
        if inspect.isawaitable(outcome):
            await outcome


class AsyncCode:
    """The code interpreter of one sandbox: `run` (also `sandbox.run_code`) and contexts."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    @property
    def _path(self) -> str:
        return f"{self._sandbox.path}/code"

    async def run(
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
        """Run `code` in `context` (default: the language's default context, Python unless
        `language` says otherwise) and return its `Execution`. `on_stdout`/`on_stderr` get an
        `OutputMessage` per chunk as it is printed, `on_result` each `Result`, `on_error` the
        `ExecutionError`. `timeout` (seconds) interrupts the code; the context keeps its state
        and `error.name` is `"TimeoutError"`. `env` is set for this execution only."""
        body: dict[str, Any] = {"code": code}
        if language is not None:
            body["language"] = language
        if context is not None:
            body["context_id"] = context.id if isinstance(context, CodeContext) else context
        if env:
            body["env_vars"] = dict(env)
        if timeout is not None:
            body["timeout"] = timeout
        execution = Execution()
        session = self._sandbox.session
        stream_timeout = httpx.Timeout(connect=10.0, read=None, write=60.0, pool=30.0)
        async with session.stream(
            "POST", f"{self._path}/execute", json_body=body, timeout=stream_timeout
        ) as response:
            async for event in session.iter_json_lines(response):
                await _apply(execution, event, on_stdout, on_stderr, on_result, on_error)
        return execution

    async def create_context(
        self, *, language: str | None = None, cwd: str | None = None
    ) -> CodeContext:
        body = {k: v for k, v in (("language", language), ("cwd", cwd)) if v is not None}
        answer = await self._sandbox.session.json(
            "POST", f"{self._path}/contexts", json_body=body, timeout=180.0
        )
        return CodeContext.from_wire(answer)

    async def list_contexts(self) -> builtins.list[CodeContext]:
        answer = await self._sandbox.session.json("GET", f"{self._path}/contexts")
        return [CodeContext.from_wire(item) for item in answer.get("contexts", [])]

    async def restart_context(self, context: CodeContext | str) -> None:
        context_id = context.id if isinstance(context, CodeContext) else context
        await self._sandbox.session.json(
            "POST", f"{self._path}/contexts/{context_id}/restart", timeout=180.0
        )

    async def remove_context(self, context: CodeContext | str) -> None:
        context_id = context.id if isinstance(context, CodeContext) else context
        await self._sandbox.session.json("DELETE", f"{self._path}/contexts/{context_id}")


async def _apply(
    execution: Execution,
    event: dict[str, Any],
    on_stdout: Callback | None,
    on_stderr: Callback | None,
    on_result: Callback | None,
    on_error: Callback | None,
) -> None:
    kind = event.get("type")
    if kind == "stdout":
        execution.logs.stdout.append(event.get("text", ""))
        await _call(on_stdout, OutputMessage(event.get("text", ""), event.get("timestamp", 0)))
    elif kind == "stderr":
        execution.logs.stderr.append(event.get("text", ""))
        message = OutputMessage(event.get("text", ""), event.get("timestamp", 0), True)
        await _call(on_stderr, message)
    elif kind == "result":
        result = Result.from_wire(event)
        execution.results.append(result)
        await _call(on_result, result)
    elif kind == "error":
        execution.error = ExecutionError(
            str(event.get("name", "")), str(event.get("value", "")), str(event.get("traceback", ""))
        )
        await _call(on_error, execution.error)
    elif kind == "number_of_executions":
        execution.execution_count = event.get("execution_count")
