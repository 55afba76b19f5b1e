"""What the lifecycle tests run inside sandboxes, and how they read it back.

- a counter: a python loop that keeps an integer in memory and publishes it atomically to a file
  ten to twenty times a second; if a sandbox came back with fresh processes, the count would
  restart from 1;
- a TCP server on the sandbox's own loopback that answers each connection with how many it has
  served, queried by an exec in the same sandbox;
- a process blocked reading stdin.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from corral import Sandbox
from corral.sdk import Process

T = TypeVar("T")

COUNTER = """
import os, sys, time
path = sys.argv[1]
i = 0
while True:
    i += 1
    with open(path + ".tmp", "w") as out:
        out.write(str(i))
    os.replace(path + ".tmp", path)
    time.sleep(0.05)
"""

SERVER = """
import socket
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 8123))
listener.listen(8)
served = 0
while True:
    conn, _ = listener.accept()
    served += 1
    conn.sendall(b"served %d\\n" % served)
    conn.close()
"""

ASK_SERVER = (
    "import socket; c = socket.create_connection(('127.0.0.1', 8123), timeout=5); "
    "print(c.recv(100).decode().strip())"
)


def wait_until(
    check: Callable[[], T | None], timeout: float = 15.0, interval: float = 0.1, what: str = ""
) -> T:
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check} (last: {last})")


def start_counter(sbx: Sandbox, path: str = "/tmp/count") -> Process:
    process = sbx.exec_background(["python3", "-c", COUNTER, path], tag="counter")
    wait_until(lambda: read_count(sbx, path), what="the counter to start")
    return process


def read_count(sbx: Sandbox, path: str = "/tmp/count") -> int:
    result = sbx.exec(["cat", path])
    return int(result.stdout) if result.exit_code == 0 and result.stdout.strip() else 0


def assert_counting(sbx: Sandbox, at_least: int, path: str = "/tmp/count") -> int:
    """The counter is not behind `at_least` (it was not restarted) and is still advancing."""
    first = read_count(sbx, path)
    assert first >= at_least, f"counter at {first}, was {at_least} before: it was restarted"
    later = wait_until(
        lambda: (n := read_count(sbx, path)) > first and n, what="the counter to advance"
    )
    return later


def start_server(sbx: Sandbox) -> Process:
    process = sbx.exec_background(["python3", "-c", SERVER], tag="server")
    wait_until(lambda: sbx.exec(["python3", "-c", ASK_SERVER]).exit_code == 0, what="server")
    return process


def ask_server(sbx: Sandbox) -> str:
    result = sbx.exec(["python3", "-c", ASK_SERVER])
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


def is_running(sbx: Sandbox, process: Process) -> bool:
    return any(p.pid == process.pid and p.running for p in sbx.processes())
