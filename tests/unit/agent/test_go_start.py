"""The Go agent's start, as a host process: with CORRAL_AGENT_TRACE it reports the steps of its
start on stderr (what bench/ reads to see where a sandbox's boot goes); without it, nothing."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
from pathlib import Path

from corral.runtime.agent_client import AgentClient

from .conftest import AGENT_KEY, GO_AGENT, _free_port

STEPS = ["main", "listen", "root", "key", "agent"]  # the steps every start reports


async def _start(tmp_path: Path, trace: bool) -> str:
    """Start the Go agent, wait until it answers, run one process in it; return its log."""
    assert GO_AGENT.exists(), f"{GO_AGENT} is missing: run scripts/setup"
    port = _free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "CORRAL_AGENT_HOST": "127.0.0.1",
        "CORRAL_AGENT_PORT": str(port),
        **({"CORRAL_AGENT_TRACE": "1"} if trace else {}),
    }
    log_path = tmp_path / "agent.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(GO_AGENT)], env=env, stdin=subprocess.PIPE, stdout=log, stderr=log, cwd="/"
        )
    assert process.stdin is not None
    process.stdin.write(f"{AGENT_KEY}\n".encode())
    process.stdin.close()
    try:
        async with AgentClient("127.0.0.1", port) as client:
            client.set_key(AGENT_KEY)
            await client.wait_ready(120.0)
            # A child right after the start: it waits for the agent's signal guard, never fails.
            events = [e async for e in client.stream_process({"cmd": ["echo", "started"]})]
            out = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "stdout")
            assert out == b"started\n" and events[-1]["exit_code"] == 0
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    return log_path.read_text()


async def test_the_start_is_reported_step_by_step_when_traced(tmp_path: Path) -> None:
    log = await _start(tmp_path, trace=True)
    lines = [line for line in log.splitlines() if line.startswith("corral agent start: ")]
    assert len(lines) == 1, log
    steps = [field.split("=") for field in lines[0].removeprefix("corral agent start: ").split()]
    names = [name for name, _ in steps]
    # Listening comes before the root is settled; the finer steps of the root depend on what
    # the agent is given (a sized root, CAP_SYS_ADMIN): only these always appear, in this order.
    assert [name for name in names if name in STEPS] == STEPS, names
    assert names[:2] == ["main", "listen"]
    stamps = [int(value) for _, value in steps]
    assert stamps == sorted(stamps)


async def test_the_start_is_not_reported_without_the_trace(tmp_path: Path) -> None:
    log = await _start(tmp_path, trace=False)
    assert "corral agent start:" not in log
    assert "listening on 127.0.0.1" in log
