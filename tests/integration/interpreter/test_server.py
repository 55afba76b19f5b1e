"""The code interpreter server as a host process with real Jupyter kernels (ipykernel and
bash_kernel from the dev dependencies): the protocol's details, fast, without a sandbox.

The same server runs inside sandboxes (tests/e2e/test_code_interpreter.py covers that path)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.host import free_port


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    home = tmp_path_factory.mktemp("interp")
    prefix = home / "jupyter"  # bash_kernel's kernelspec, in the test's own dir
    subprocess.run(
        [sys.executable, "-m", "bash_kernel.install", "--prefix", str(prefix)],
        check=True,
        capture_output=True,
    )
    port = free_port()
    log = open(home / "server.log", "wb")  # noqa: SIM115 (closed at teardown)
    process = subprocess.Popen(
        [sys.executable, "-m", "corral.interpreter", "--host", "127.0.0.1", "--port", str(port)],
        cwd=home,
        stdout=log,
        stderr=log,
        env={**os.environ, "HOME": str(home), "JUPYTER_PATH": str(prefix / "share" / "jupyter")},
        start_new_session=True,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
    deadline = time.monotonic() + 60
    while True:
        try:
            if client.get("/health").status_code == 200:
                break
        except httpx.TransportError:
            assert process.poll() is None, (home / "server.log").read_text()
            assert time.monotonic() < deadline, "the interpreter did not start"
            time.sleep(0.05)
    try:
        yield client
    finally:
        client.close()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def run(client: httpx.Client, code: str, **fields: Any) -> list[dict[str, Any]]:
    with client.stream("POST", "/execute", json={"code": code, **fields}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"] == "application/x-ndjson"
        return [json.loads(line) for line in response.iter_lines() if line]


def test_events_follow_e2b_protocol(server: httpx.Client) -> None:
    events = run(server, "print('out'); import sys; print('err', file=sys.stderr); 6 * 7")
    kinds = [e["type"] for e in events]
    assert kinds == ["stdout", "stderr", "result", "number_of_executions", "end_of_execution"]
    assert events[0]["text"] == "out\n" and isinstance(events[0]["timestamp"], int)
    assert events[2] == {"type": "result", "is_main_result": True, "text": "42"}


def test_display_data_is_not_the_main_result(server: httpx.Client) -> None:
    events = run(server, "from IPython.display import display, HTML\ndisplay(HTML('<b>hi</b>'))")
    result = next(e for e in events if e["type"] == "result")
    assert result["is_main_result"] is False and result["html"] == "<b>hi</b>"


def test_env_vars_apply_to_one_execution_and_leave_no_names(server: httpx.Client) -> None:
    events = run(server, "import os; os.environ['ONLY_NOW']", env_vars={"ONLY_NOW": "yes"})
    assert events[0]["text"] == "'yes'"
    probe = "import os; (os.environ.get('ONLY_NOW'), [n for n in dir() if 'corral' in n])"
    after = run(server, probe)
    assert after[0]["text"] == "(None, [])"
    bad = server.post("/execute", json={"code": "1", "env_vars": {"not valid": "x"}})
    assert bad.status_code == 400 and "identifiers" in bad.json()["error"]


def test_bash_errors_and_unknown_languages(server: httpx.Client) -> None:
    events = run(server, "false", language="bash")
    error = next(e for e in events if e["type"] == "error")
    assert error["name"] == "Error" and error["value"] == "1"
    refused = server.post("/execute", json={"code": "1", "language": "cobol"})
    assert refused.status_code == 400
    assert "installed: bash, python" in refused.json()["error"]
    both = server.post("/execute", json={"code": "1", "language": "python", "context_id": "x"})
    assert both.status_code == 400


def test_code_that_ignores_the_interrupt_gets_a_fresh_kernel(server: httpx.Client) -> None:
    ctx = server.post("/contexts", json={}).json()
    run(server, "state = 1", context_id=ctx["id"])
    stubborn = (
        "import time\n"
        "while True:\n"
        "    try:\n"
        "        time.sleep(0.05)\n"
        "    except KeyboardInterrupt:\n"
        "        pass\n"
    )
    events = run(server, stubborn, context_id=ctx["id"], timeout=1)
    error = next(e for e in events if e["type"] == "error")
    assert error["name"] == "TimeoutError" and "state is lost" in error["value"]
    assert events[-1] == {"type": "end_of_execution"}
    again = run(server, "'state' in dir()", context_id=ctx["id"])
    assert again[0]["text"] == "False"


def test_a_client_that_goes_away_interrupts_its_execution(server: httpx.Client) -> None:
    ctx = server.post("/contexts", json={}).json()
    with server.stream(
        "POST",
        "/execute",
        json={
            "code": "import time\nprint('go', flush=True)\ntime.sleep(600)",
            "context_id": ctx["id"],
        },
    ) as response:
        for line in response.iter_lines():
            assert json.loads(line)["type"] == "stdout"
            break  # leave: the connection closes
    # The context is free again (the abandoned sleep was interrupted), not stuck for 600 s.
    events = run(server, "'free'", context_id=ctx["id"])
    assert events[0]["text"] == "'free'"


def test_a_kernel_that_dies_is_restarted_and_says_so(server: httpx.Client) -> None:
    ctx = server.post("/contexts", json={}).json()
    events = run(server, "import os; os._exit(1)", context_id=ctx["id"])
    error = next(e for e in events if e["type"] == "error")
    assert error["name"] == "KernelDied" and "state is lost" in error["value"]
    assert run(server, "1 + 1", context_id=ctx["id"])[0]["text"] == "2"


def test_executions_in_one_context_queue_and_contexts_run_side_by_side(
    server: httpx.Client,
) -> None:
    a = server.post("/contexts", json={}).json()["id"]
    b = server.post("/contexts", json={}).json()["id"]
    order: list[str] = []

    def slow() -> None:
        run(server, "import time; time.sleep(1)", context_id=a)
        order.append("slow-a")

    thread = threading.Thread(target=slow)
    thread.start()
    assert run(server, "'b'", context_id=b)[0]["text"] == "'b'"
    order.append("b")
    thread.join()
    assert order == ["b", "slow-a"]


def test_requests_are_bounded_and_routes_checked(server: httpx.Client, tmp_path: Path) -> None:
    # A declared body over the bound is refused before any of it is read.
    with socket.create_connection((server.base_url.host, server.base_url.port)) as sock:
        sock.sendall(b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 413 ")
    assert server.post("/contexts", json={"cwd": str(tmp_path / "missing")}).status_code == 400
    assert server.get("/nothing").status_code == 404
    assert server.post("/contexts/nope/restart").status_code == 404
