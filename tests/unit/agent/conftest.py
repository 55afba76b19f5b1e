"""The real agent as a host process on a loopback port, driven through ``AgentClient``.

Started exactly as in a sandbox (``python -I -S agent.py``, standard library only), minus the
isolation. Not PID 1 here, so the agent makes itself a child subreaper and orphans still come to it.
Its log is printed at teardown, which pytest shows when a test fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from corral.agent import AGENT_DIR, AGENT_PATH
from corral.runtime.agent_client import AgentClient, AgentError
from tests.unit.conftest import default_signals

AGENT_KEY = "ab" * 32


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalAgent:
    client: AgentClient
    pid: int
    port: int


GO_AGENT = AGENT_DIR / "go" / "corral-agent"


@pytest.fixture(params=["python", "go"])
async def agent(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[LocalAgent]:
    """The agent under test, once per implementation: the same assertions prove their parity.
    The Go agent is built by scripts/setup (scripts/build-agent)."""
    if request.param == "go":
        assert GO_AGENT.exists(), f"{GO_AGENT} is missing: run scripts/setup"
        argv = [str(GO_AGENT)]
    else:
        argv = [sys.executable, "-I", "-S", str(AGENT_PATH)]
    port = _free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "CORRAL_TEST_DEFAULT": "from-agent-env",
        "CORRAL_AGENT_HOST": "127.0.0.1",
        "CORRAL_AGENT_PORT": str(port),
        "CORRAL_AGENT_SECRET": "must-not-leak",
    }
    log_path = tmp_path / "agent.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd="/",
            preexec_fn=default_signals,
        )
    assert process.stdin is not None
    process.stdin.write(f"{AGENT_KEY}\n".encode())  # the key, as the runtime hands it over
    process.stdin.close()
    # Patient bounds: they only guard against a hung agent, and a loaded 2-core CI machine can
    # take many seconds to answer a call that starts or lists a thousand processes.
    client = AgentClient("127.0.0.1", port, unary_timeout=httpx.Timeout(300.0, connect=60.0))
    client.set_key(AGENT_KEY)
    try:
        await client.wait_ready(120.0)
        yield LocalAgent(client=client, pid=process.pid, port=port)
    finally:
        # Process groups outlive the agent on a host (no PID namespace): kill what is left.
        with contextlib.suppress(AgentError):
            for info in await client.list_processes():
                if info["running"]:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(info["pid"], signal.SIGKILL)
        await client.aclose()
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        print(f"--- agent log ({log_path}) ---\n{log_path.read_text(errors='replace')}")
