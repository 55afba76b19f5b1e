"""The exec wire format: the request body, the NDJSON event lines, and `OutputCollector`, which
turns a process's events into its `ExecResult`.

Standard library and `corral.sdk._exec_models` only, so both transports (httpx, and the plain-http
exec stream of `corral.sdk.plainhttp`) share them.
"""

from __future__ import annotations

import base64
import codecs
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from corral.sdk._exec_models import ExecResult, ProcessEvent
from corral.sdk.errors import ConnectionFailed

__all__ = [
    "EventCallback",
    "OutputCallback",
    "OutputCollector",
    "build_exec_body",
    "parse_event",
]

OutputCallback = Callable[[str], Awaitable[Any] | Any]
EventCallback = Callable[[ProcessEvent], Awaitable[Any] | Any]


def build_exec_body(
    cmd: str | Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    user: str | None = None,
    timeout: float | None = None,
    stdin: bool = False,
    background: bool = False,
    tag: str | None = None,
) -> dict[str, Any]:
    """The ExecRequest body: a str runs through /bin/sh -c, a sequence is the argv."""
    body: dict[str, Any] = {}
    if isinstance(cmd, str):
        if not cmd.strip():
            raise ValueError("empty command")
        body["shell"] = cmd
    else:
        argv = [str(arg) for arg in cmd]
        if not argv:
            raise ValueError("empty command")
        body["cmd"] = argv
    if env:
        body["env"] = dict(env)
    optional = {"cwd": cwd, "user": user, "timeout": timeout, "tag": tag}
    body.update({key: value for key, value in optional.items() if value is not None})
    if stdin:
        body["stdin"] = True
    if background:
        body["background"] = True
    return body


def parse_event(raw: Mapping[str, Any]) -> ProcessEvent:
    """One NDJSON line of a process's event stream (output data is base64 on the wire)."""
    data = raw.get("data")
    return ProcessEvent(
        seq=int(raw.get("seq", -1)),
        type=str(raw.get("type", "")),
        data=base64.b64decode(data) if data else b"",
        pid=raw.get("pid"),
        exit_code=raw.get("exit_code"),
        signal=raw.get("signal"),
        timed_out=bool(raw.get("timed_out", False)),
        dropped_bytes=int(raw.get("dropped_bytes", 0) or 0),
    )


class OutputCollector:
    """Accumulates a process's events into an `ExecResult`, calling the caller's hooks.

    Text hooks get UTF-8 decoded chunks; a character split across two chunks is held back until
    it is complete. Events already seen (by `seq`) are ignored, which makes replays harmless.
    """

    def __init__(
        self,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        on_event: EventCallback | None = None,
    ) -> None:
        self._hooks = {"stdout": on_stdout, "stderr": on_stderr}
        self._on_event = on_event
        self._buffers = {"stdout": bytearray(), "stderr": bytearray()}
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")(errors="replace") for name in self._hooks
        }
        self.pid: int | None = None
        self.last_seq = -1
        self.dropped_bytes = 0
        self.exit: ProcessEvent | None = None

    async def feed(self, event: ProcessEvent) -> None:
        for answer in self._take(event):
            if inspect.isawaitable(answer):
                await answer

    def feed_sync(self, event: ProcessEvent) -> None:
        """`feed` for synchronous callers: the hooks must not be coroutine functions."""
        for answer in self._take(event):
            if inspect.isawaitable(answer):
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
                raise TypeError("feed_sync cannot await an async output callback")

    def _take(self, event: ProcessEvent) -> list[Any]:
        """Account for one event; returns what the hooks it called returned."""
        answers: list[Any] = []
        if event.seq <= self.last_seq:
            return answers
        self.last_seq = event.seq
        if event.type == "start" and event.pid is not None:
            self.pid = event.pid
        elif event.type in self._buffers:
            self._buffers[event.type] += event.data
            hook = self._hooks[event.type]
            if hook is not None:
                text = self._decoders[event.type].decode(event.data)
                if text:
                    answers.append(hook(text))
        elif event.type == "truncated":
            self.dropped_bytes += event.dropped_bytes
        elif event.type == "exit":
            self.exit = event
            for name, hook in self._hooks.items():
                tail = self._decoders[name].decode(b"", final=True)
                if hook is not None and tail:
                    answers.append(hook(tail))
        if self._on_event is not None:
            answers.append(self._on_event(event))
        return answers

    def result(self) -> ExecResult:
        if self.exit is None:
            raise ConnectionFailed("the process's event stream ended before its exit", url="")
        exit_code = self.exit.exit_code
        if exit_code is None:
            exit_code = 128 + self.exit.signal if self.exit.signal is not None else -1
        out, err = bytes(self._buffers["stdout"]), bytes(self._buffers["stderr"])
        return ExecResult(
            exit_code=exit_code,
            stdout=out.decode("utf-8", errors="replace"),
            stderr=err.decode("utf-8", errors="replace"),
            stdout_bytes=out,
            stderr_bytes=err,
            pid=self.pid if self.pid is not None else -1,
            timed_out=self.exit.timed_out,
            signal=self.exit.signal,
            dropped_bytes=self.dropped_bytes,
        )
