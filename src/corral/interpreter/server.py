"""The HTTP front of the code interpreter: E2B's code-interpreter routes on port 49999.

Routes (bodies JSON; errors ``{"error": "<message>", "code": "<code>"}`` with 400/404/409/413):

- ``GET /health`` → ``{"ok": true}``
- ``POST /execute`` ``{"code", "context_id"?, "language"?, "env_vars"?, "timeout"?}`` → 200
  ``application/x-ndjson``, chunked, one event per line as it happens (``execution.py``).
  ``context_id`` and ``language`` exclude each other; with neither, Python's default context.
  ``timeout`` (seconds) is corral's addition; E2B's SDK bounds its own read instead, and its
  going away interrupts the code just the same.
- ``POST /contexts`` ``{"language"?, "cwd"?}`` → ``{"id", "language", "cwd"}``
- ``GET /contexts`` → a list of those
- ``DELETE /contexts/{id}`` → 204; ``POST /contexts/{id}/restart`` → 204

Threads: one per connection (``ThreadingHTTPServer``); an execution holds its context's lock, so
executions in one context queue and different contexts run side by side. Request bodies are
bounded (``MAX_BODY``); nothing here trusts a length it did not check.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import select
import signal
import socket
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import PORT
from .execution import ExecutionError, check_env, execute
from .kernels import ContextTable, UnknownContext, UnknownLanguage

__all__ = ["InterpreterServer", "main"]

log = logging.getLogger("corral.interpreter")

MAX_BODY = 16 * 1024 * 1024  # code plus env vars of one request
MAX_TIMEOUT = 24 * 3600.0


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class InterpreterServer(ThreadingHTTPServer):
    """The listening server; ``contexts`` is shared by every request thread."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], contexts: ContextTable) -> None:
        super().__init__(address, _Handler)
        self.contexts = contexts


class _Handler(BaseHTTPRequestHandler):
    server: InterpreterServer
    protocol_version = "HTTP/1.1"
    server_version = "corral-interpreter/1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    # -- plumbing ------------------------------------------------------------------------------
    def _body(self) -> dict[str, Any]:
        length_text = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise _Refused(411, "bad_request", "send the body with a Content-Length")
        try:
            length = int(length_text or 0)
        except ValueError:
            raise _Refused(400, "bad_request", "Content-Length is not a number") from None
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            raise _Refused(413, "too_large", f"the request body is over {MAX_BODY} bytes")
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            raise _Refused(400, "bad_request", "the body is not JSON") from None
        if not isinstance(body, dict):
            raise _Refused(400, "bad_request", "the body must be a JSON object")
        return body

    def _send_json(self, status: int, value: object) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_empty(self) -> None:
        self.send_response(HTTPStatus.NO_CONTENT)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        try:
            if method == "GET" and path == "/health":
                self._send_json(200, {"ok": True})
            elif method == "POST" and path == "/execute":
                self._execute(self._body())
            elif method == "POST" and path == "/contexts":
                self._create(self._body())
            elif method == "GET" and path == "/contexts":
                self._send_json(200, [c.describe() for c in self.server.contexts.all()])
            elif path.startswith("/contexts/"):
                self._one_context(method, path[len("/contexts/") :])
            else:
                raise _Refused(404, "not_found", f"no route {method} {path}")
        except _Refused as exc:
            self._send_json(exc.status, {"error": str(exc), "code": exc.code})

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- routes --------------------------------------------------------------------------------
    def _one_context(self, method: str, rest: str) -> None:
        context_id, _, action = rest.partition("/")
        contexts = self.server.contexts
        try:
            if method == "DELETE" and not action:
                contexts.remove(context_id)
            elif method == "POST" and action == "restart":
                context = contexts.get(context_id)
                with context.lock:
                    context.restart()
            else:
                raise _Refused(404, "not_found", f"no route {method} /contexts/{rest}")
        except UnknownContext as exc:
            raise _Refused(404, "not_found", exc.args[0]) from None
        self._send_empty()

    def _create(self, body: dict[str, Any]) -> None:
        language, cwd = body.get("language"), body.get("cwd")
        if not isinstance(language, str | None) or not isinstance(cwd, str | None):
            raise _Refused(400, "bad_request", "'language' and 'cwd' must be strings")
        try:
            context = self.server.contexts.create(language, cwd)
        except (UnknownLanguage, ValueError) as exc:
            raise _Refused(400, "bad_request", str(exc)) from None
        except OverflowError as exc:
            raise _Refused(409, "conflict", str(exc)) from None
        self._send_json(200, context.describe())

    def _execute(self, body: dict[str, Any]) -> None:
        code = body.get("code")
        context_id, language = body.get("context_id"), body.get("language")
        timeout = body.get("timeout")
        if not isinstance(code, str):
            raise _Refused(400, "bad_request", "'code' must be a string")
        if context_id and language:
            raise _Refused(400, "bad_request", "give 'context_id' or 'language', not both")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= MAX_TIMEOUT
        ):
            raise _Refused(400, "bad_request", f"'timeout' must be seconds in (0, {MAX_TIMEOUT:g}]")
        try:
            env = check_env(body.get("env_vars"))
            if context_id:
                context = self.server.contexts.get(str(context_id))
            else:
                context = self.server.contexts.default(language)
        except UnknownContext as exc:
            raise _Refused(404, "not_found", exc.args[0]) from None
        except (UnknownLanguage, ExecutionError) as exc:
            raise _Refused(400, "bad_request", str(exc)) from None
        except RuntimeError as exc:  # a kernel that did not start
            raise _Refused(409, "conflict", str(exc)) from None
        with context.lock:
            if context.client is None:
                raise _Refused(404, "not_found", f"context {context.id} was removed")
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                execute(
                    context,
                    code,
                    env=env,
                    timeout=float(timeout) if timeout else None,
                    emit=self._write_event,
                    gone=self._client_gone,
                )
            except ExecutionError as exc:
                self._write_event({"type": "error", "name": "ValueError", "value": str(exc)})
                self._write_event({"type": "end_of_execution"})
            try:
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                self.close_connection = True

    def _write_event(self, event: dict[str, Any]) -> None:
        line = json.dumps(event).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.flush()

    def _client_gone(self) -> bool:
        """Whether the client closed its end (readable with nothing to read)."""
        sock: socket.socket = self.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return False
            return sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="corral_interpreter", description=__doc__)
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--cwd", default=None, help="Default working directory of contexts.")
    parser.add_argument("--no-preload", action="store_true", help="Start no kernel up front.")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("CORRAL_INTERPRETER_LOG", "INFO"),
        format="corral-interpreter %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    contexts = ContextTable(args.cwd or os.getcwd())
    server = InterpreterServer((args.host, args.port), contexts)

    def stop(_signum: int, _frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    if not args.no_preload:
        # The default Python kernel starts now, so the first execution (and a warm template's
        # checkpoint) finds it ready.
        def preload() -> None:
            try:
                contexts.default("python")
            except Exception as exc:  # the server still serves other languages
                log.warning("no default Python context: %s", exc)

        threading.Thread(target=preload, name="preload", daemon=True).start()
    log.info("listening on %s:%d", args.host, args.port)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        contexts.shutdown()
        server.server_close()
