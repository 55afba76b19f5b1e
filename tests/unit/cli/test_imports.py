"""Import discipline of the CLI (issue 14): each command imports only what it uses.

Every check runs `corral` in a fresh interpreter and looks at `sys.modules` when it ends: help
never imports the HTTP stack, rich, pydantic or the daemon; `corral exec` (against a small
stdlib stand-in for the daemon on 127.0.0.1) talks plain HTTP without httpx, asyncio or anyio,
and prints, streams and exits exactly as through the SDK.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from corral.cli.fast import HELP_FILE, render_full_help

HEAVY = ("httpx", "httpcore", "rich", "pygments", "pydantic", "fastapi", "sqlalchemy", "uvicorn")
LOOP = ("asyncio", "anyio")
DAEMON = ("service", "api", "runtime", "network", "images", "storage", "mcp")

_RUN = """
import json, sys
sys.argv = ["corral", *json.loads(sys.argv[1])]
try:
    from corral.cli.fast import main
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open({report!r}, "w") as out:
    json.dump({{"modules": sorted(sys.modules), "code": code}}, out)
"""


def run_corral(
    tmp_path: Any, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    report = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", _RUN.format(report=str(report)), json.dumps(args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )
    answer = json.loads(report.read_text())
    done.returncode = answer["code"] if isinstance(answer["code"], int) else 1
    return done, answer["modules"]


def imported(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(names))


def daemon_modules(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[:2][-1] in DAEMON and m.startswith("corral.")]


@pytest.mark.parametrize(
    "args",
    [("--help",), ("exec", "--help"), ("files", "--help"), ("template", "create", "--help")],
)
def test_help_imports_no_http_stack_rich_pydantic_or_daemon(tmp_path: Any, args: Any) -> None:
    done, modules = run_corral(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert "Usage: corral" in done.stdout
    assert imported(modules, HEAVY + LOOP) == []
    assert daemon_modules(modules) == []


def test_import_corral_loads_the_sdk_only_when_used() -> None:
    code = (
        "import sys, corral; bare = sorted(sys.modules);"
        "from corral import Sandbox, CorralError; print(Sandbox.__module__, CorralError.__name__);"
        "print([m for m in bare if m.startswith('corral.')]);"
        f"print([m for m in sys.modules if m.split('.')[0] in {HEAVY[4:]!r}])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "corral.sdk.sync CorralError"
    assert lines[1] == "[]"  # `import corral` alone imports none of its submodules
    assert lines[2] == "[]"  # the SDK never imports pydantic or the daemon's stack


class _StandIn(BaseHTTPRequestHandler):
    """Answers `POST /v1/sandboxes/{id}/exec` as the daemon does: chunked NDJSON events."""

    protocol_version = "HTTP/1.1"
    requests: list[dict[str, Any]] = []

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _StandIn.requests.append(
            {"path": self.path, "auth": self.headers["Authorization"], "body": body}
        )
        if self.headers["Authorization"] != "Bearer k":
            return self._answer(401, {"code": "unauthorized", "message": "invalid API key"})
        if self.path == "/v1/sandboxes/sb-3/exec":
            return self._break_after_start()
        if self.path != "/v1/sandboxes/sb-1/exec":
            return self._answer(404, {"code": "not_found", "message": "sandbox sb-2 not found"})
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [
            {"seq": 0, "type": "start", "pid": 7},
            {"seq": 1, "type": "stdout", "data": base64.b64encode(b"hi\n").decode()},
            {"seq": 2, "type": "stderr", "data": base64.b64encode(b"err\n").decode()},
            {"seq": 3, "type": "exit", "exit_code": 3},
        ]
        for event in events:
            line = json.dumps(event).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.write(b"0\r\n\r\n")

    def _break_after_start(self) -> None:
        """The stream breaks off after the start and some output, before the exit."""
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in (
            {"seq": 0, "type": "start", "pid": 7},
            {"seq": 1, "type": "stdout", "data": base64.b64encode(b"one\n").decode()},
        ):
            line = json.dumps(event).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:
        """The process's events after the last one seen: the rest of its output and its exit."""
        _StandIn.requests.append({"path": self.path, "auth": self.headers["Authorization"]})
        if not self.path.startswith("/v1/sandboxes/sb-3/processes/7/events?after=1"):
            return self._answer(404, {"code": "not_found", "message": "no such route"})
        events = [
            {"seq": 2, "type": "stdout", "data": base64.b64encode(b"two\n").decode()},
            {"seq": 3, "type": "exit", "exit_code": 0},
        ]
        raw = b"".join(json.dumps(event).encode() + b"\n" for event in events)
        self.send_response(200)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _answer(self, status: int, body: dict[str, str]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def stand_in() -> Iterator[str]:
    _StandIn.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _env(url: str, key: str = "k") -> dict[str, str]:
    return {"CORRAL_URL": url, "CORRAL_API_KEY": key, "http_proxy": "", "HTTP_PROXY": ""}


def test_exec_streams_and_exits_over_plain_http_without_httpx(tmp_path: Any, stand_in: str) -> None:
    done, modules = run_corral(
        tmp_path, "exec", "--env", "A=1", "sb-1", "--", "sh", "-c", "x", env=_env(stand_in)
    )
    assert (done.stdout, done.stderr, done.returncode) == ("hi\n", "err\n", 3)
    assert _StandIn.requests == [
        {
            "path": "/v1/sandboxes/sb-1/exec",
            "auth": "Bearer k",
            "body": {"cmd": ["sh", "-c", "x"], "env": {"A": "1"}},
        }
    ]
    assert imported(modules, HEAVY + LOOP) == []
    assert daemon_modules(modules) == []
    # Only the exec verb's module of the CLI is loaded, none of the other verbs'.
    verbs = sorted(m for m in modules if m.startswith("corral.cli."))
    assert verbs == ["corral.cli._state", "corral.cli.exec", "corral.cli.fast", "corral.cli.main"]


def test_exec_and_help_without_options_import_no_typer_or_click(
    tmp_path: Any, stand_in: str
) -> None:
    done, modules = run_corral(tmp_path, "exec", "sb-1", "--", "sh", "-c", "x", env=_env(stand_in))
    assert (done.stdout, done.stderr, done.returncode) == ("hi\n", "err\n", 3)
    assert _StandIn.requests[-1]["body"] == {"cmd": ["sh", "-c", "x"]}
    assert imported(modules, HEAVY + LOOP + ("typer", "click")) == []
    assert [m for m in modules if m.startswith("corral.cli.")] == ["corral.cli.fast"]
    shown, modules = run_corral(tmp_path, "--help", env={"COLUMNS": "120"})
    assert shown.stdout == HELP_FILE.read_text()
    assert imported(modules, ("typer", "click")) == []


def test_the_fast_help_is_the_full_clis_own() -> None:
    assert HELP_FILE.read_text() == render_full_help(), (
        "the root help changed: run `python -m corral.cli.fast --write-help`"
    )


def test_exec_errors_read_as_through_the_sdk(tmp_path: Any, stand_in: str) -> None:
    missing, _ = run_corral(tmp_path, "exec", "sb-2", "--", "true", env=_env(stand_in))
    assert (missing.returncode, missing.stderr) == (1, "error: sandbox sb-2 not found\n")
    denied, _ = run_corral(tmp_path, "exec", "sb-1", "--", "true", env=_env(stand_in, "bad"))
    assert denied.returncode == 1
    assert denied.stderr == "error: invalid API key (check CORRAL_API_KEY or --api-key)\n"
    # A socket bound but not listening refuses connections, and no one else can take its port.
    with socket.socket() as unbound:
        unbound.bind(("127.0.0.1", 0))
        refused_url = f"http://127.0.0.1:{unbound.getsockname()[1]}"
        refused, _ = run_corral(tmp_path, "exec", "sb-1", "--", "true", env=_env(refused_url))
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"error: cannot reach the corral daemon at {refused_url} (")
    assert "start it with `./scripts/serve` or `corral serve`" in refused.stderr


def test_exec_stream_broken_after_start_is_followed_to_its_exit(
    tmp_path: Any, stand_in: str
) -> None:
    done, _ = run_corral(tmp_path, "exec", "sb-3", "--", "true", env=_env(stand_in))
    assert (done.stdout, done.returncode) == ("one\ntwo\n", 0), done.stderr
    assert [r["path"].partition("?")[0] for r in _StandIn.requests] == [
        "/v1/sandboxes/sb-3/exec",
        "/v1/sandboxes/sb-3/processes/7/events",
    ]
