"""One execution in a context, as the protocol's events.

``execute`` sends the code to the context's kernel and hands every event to ``emit`` as it
happens, in the order E2B's server sends them: ``stdout``/``stderr`` (``text``, ``timestamp`` in
ns), ``result`` (one field per format: ``text``, ``html``, ``markdown``, ``svg``, ``png``,
``jpeg``, ``pdf``, ``latex``, ``json``, ``javascript``, ``data``, ``extra``, and
``is_main_result``), ``error`` (``name``, ``value``, ``traceback`` as one string), then
``number_of_executions`` and ``end_of_execution``.

Guarantees:
- a ``timeout`` (seconds) interrupts the code (SIGINT to the kernel: Python raises
  KeyboardInterrupt, Bash stops the command) and reports ``TimeoutError``; the context keeps its
  state. Code that ignores the interrupt for ``INTERRUPT_GRACE`` seconds gets its kernel
  restarted, and the error says the state is lost;
- a client that goes away (``emit`` raises ``OSError`` or ``gone()`` says so) interrupts the code
  the same way, so an abandoned execution never holds the context;
- output is bounded: at most ``MAX_OUTPUT_BYTES`` of stdout/stderr per execution reach the client
  (then one note on stderr, the rest dropped while the code runs on), in events of at most
  ``MAX_EVENT_TEXT`` characters; a result's formats larger than ``MAX_RESULT_BYTES`` together are
  dropped with a note;
- a kernel that dies (killed, out of memory, ``os._exit``) is restarted and the error says so.
"""

from __future__ import annotations

import json
import queue
import re
import shlex
import time
from collections.abc import Callable
from typing import Any

from .kernels import Context

__all__ = ["ExecutionError", "execute"]

INTERRUPT_GRACE = 5.0
MAX_OUTPUT_BYTES = 8 * 1024 * 1024
MAX_EVENT_TEXT = 256 * 1024
MAX_RESULT_BYTES = 16 * 1024 * 1024
MAX_ENV_BYTES = 256 * 1024
_POLL = 0.2
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
}
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Emit = Callable[[dict[str, Any]], None]


class ExecutionError(ValueError):
    """The request cannot run as asked (bad env vars for this language); nothing ran."""


def _now() -> int:
    return time.time_ns()


def _result_event(data: dict[str, Any], main: bool) -> tuple[dict[str, Any], list[str]]:
    """A ``result`` event from a display bundle, and the formats dropped for their size."""
    event: dict[str, Any] = {"type": "result", "is_main_result": main}
    extra: dict[str, Any] = {}
    dropped: list[str] = []
    size = 0
    for mime, value in data.items():
        length = len(value) if isinstance(value, str) else len(json.dumps(value))
        if size + length > MAX_RESULT_BYTES:
            dropped.append(mime)
            continue
        size += length
        field = _MIME_FIELDS.get(mime)
        if field is None:
            extra[mime] = value
        else:
            event[field] = value
    if extra:
        event["extra"] = extra
    return event, dropped


def _env_snippets(language: str, env: dict[str, str]) -> tuple[str, str]:
    """Code that sets ``env`` in the kernel before the execution, and code that puts the
    previous values back after it (nothing of either is left in the user's namespace)."""
    if language == "python":
        keys = json.dumps(sorted(env))
        before = (
            "__import__('builtins').__corral_env__ = "
            f"{{k: __import__('os').environ.get(k) for k in {keys}}}\n"
            f"__import__('os').environ.update({json.dumps(env)})"
        )
        after = (
            "[__import__('os').environ.__setitem__(k, v) if v is not None "
            "else __import__('os').environ.pop(k, None) "
            "for k, v in __import__('builtins').__dict__.pop('__corral_env__', {}).items()]"
        )
        return before, after
    if language == "bash":
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        before = f'__corral_env_saved="$(export -p)"; export {assigns}'
        after = (
            f'unset {" ".join(sorted(env))}; eval "$__corral_env_saved"; unset __corral_env_saved'
        )
        return before, after
    raise ExecutionError(
        f"env_vars are supported in python and bash contexts, not in {language} ones"
    )


def check_env(env: object) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ExecutionError("'env_vars' must be an object of string values")
    bad = [k for k in env if not _ENV_KEY.fullmatch(k)]
    if bad:
        raise ExecutionError(f"env var names must be identifiers: {bad[:5]}")
    if len(json.dumps(env)) > MAX_ENV_BYTES:
        raise ExecutionError(f"'env_vars' is larger than {MAX_ENV_BYTES} bytes")
    return dict(env)


class _Run:
    """The state of one execution while its events flow (see the module docstring)."""

    def __init__(self, context: Context, emit: Emit, gone: Callable[[], bool]) -> None:
        self.context = context
        self._emit = emit
        self.gone = gone
        self.client_lost = False
        self.output_bytes = 0
        self.output_dropped = 0
        self.execution_count: int | None = None

    def emit(self, event: dict[str, Any]) -> None:
        if self.client_lost:
            return
        try:
            self._emit(event)
        except OSError:
            self.client_lost = True

    def stream(self, name: str, text: str) -> None:
        room = MAX_OUTPUT_BYTES - self.output_bytes
        if room <= 0:
            self.output_dropped += len(text)
            return
        if len(text) > room:
            self.output_dropped += len(text) - room
            text = text[:room]
        self.output_bytes += len(text)
        for start in range(0, len(text), MAX_EVENT_TEXT):
            piece = text[start : start + MAX_EVENT_TEXT]
            self.emit({"type": name, "text": piece, "timestamp": _now()})
        if self.output_bytes >= MAX_OUTPUT_BYTES:
            self.emit(
                {
                    "type": "stderr",
                    "text": f"\n[corral: output over {MAX_OUTPUT_BYTES // (1024 * 1024)} MiB; "
                    "the rest of this execution's output is dropped]\n",
                    "timestamp": _now(),
                }
            )


def _send(context: Context, code: str, silent: bool) -> str:
    return str(
        context.client.execute(
            code, silent=silent, store_history=not silent, allow_stdin=False, stop_on_error=False
        )
    )


def _drain_shell(context: Context, msg_ids: set[str], timeout: float = 10.0) -> None:
    """Read the shell replies of ``msg_ids`` (so none pile up in the client's queue)."""
    deadline = time.monotonic() + timeout
    while msg_ids and time.monotonic() < deadline:
        try:
            reply = context.client.get_shell_msg(timeout=_POLL)
        except queue.Empty:
            continue
        msg_ids.discard(reply.get("parent_header", {}).get("msg_id", ""))


def execute(
    context: Context,
    code: str,
    *,
    env: dict[str, str],
    timeout: float | None,
    emit: Emit,
    gone: Callable[[], bool] = lambda: False,
) -> None:
    """Run ``code`` in ``context`` (whose lock the caller holds), emitting its events."""
    run = _Run(context, emit, gone)
    before, after = _env_snippets(context.language, env) if env else ("", "")
    sent: set[str] = set()
    if before:
        sent.add(_send(context, before, silent=True))
    msg_id = _send(context, code, silent=False)
    sent.add(msg_id)
    deadline = time.monotonic() + timeout if timeout else None
    interrupted_at: float | None = None
    why = ""
    while True:
        try:
            msg = context.client.get_iopub_msg(timeout=_POLL)
        except queue.Empty:
            msg = None
        now = time.monotonic()
        if interrupted_at is None:
            if deadline is not None and now >= deadline:
                why = "timeout"
            elif run.client_lost or run.gone():
                why = "client"
            if why:
                context.interrupt()
                interrupted_at = now
        elif now - interrupted_at > INTERRUPT_GRACE:
            context.restart()
            _report_stop(run, why, timeout, restarted=True)
            _finish(run, context, sent=set())
            return
        if msg is None:
            if not context.alive():
                context.restart()
                run.emit(
                    {
                        "type": "error",
                        "name": "KernelDied",
                        "value": f"the {context.language} kernel of context {context.id} exited "
                        "while running this code (killed, out of memory, or it exited itself); "
                        "it was restarted and its state is lost",
                        "traceback": "",
                    }
                )
                _finish(run, context, sent=set())
                return
            continue
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind = msg.get("msg_type")
        content = msg.get("content", {})
        if kind == "status" and content.get("execution_state") == "idle":
            break
        if kind == "stream":
            run.stream("stderr" if content.get("name") == "stderr" else "stdout", content["text"])
        elif kind in ("execute_result", "display_data", "update_display_data"):
            event, dropped = _result_event(dict(content.get("data", {})), kind == "execute_result")
            run.emit(event)
            if dropped:
                run.stream("stderr", f"[corral: result formats over the size bound: {dropped}]\n")
        elif kind == "error":
            if why:
                continue  # the KeyboardInterrupt of our own interrupt: reported below
            traceback = "\n".join(_ANSI.sub("", line) for line in content.get("traceback", []))
            run.emit(
                {
                    "type": "error",
                    "name": content.get("ename") or "Error",  # bash_kernel sends none
                    "value": content.get("evalue", ""),
                    "traceback": traceback,
                }
            )
        elif kind == "execute_input":
            run.execution_count = content.get("execution_count")
    if why:
        _report_stop(run, why, timeout, restarted=False)
    if after:
        sent.add(_send(context, after, silent=True))
    _finish(run, context, sent)


def _report_stop(run: _Run, why: str, timeout: float | None, *, restarted: bool) -> None:
    if why != "timeout":
        return  # nobody is listening
    state = (
        "it ignored the interrupt, so its kernel was restarted and the context's state is lost"
        if restarted
        else "it was interrupted; the context keeps its state"
    )
    run.emit(
        {
            "type": "error",
            "name": "TimeoutError",
            "value": f"execution timed out after {timeout:g} s: {state}",
            "traceback": "",
        }
    )


def _finish(run: _Run, context: Context, sent: set[str]) -> None:
    _drain_shell(context, sent)
    if run.execution_count is not None:
        run.emit({"type": "number_of_executions", "execution_count": run.execution_count})
    run.emit({"type": "end_of_execution"})
