"""PTY processes of the agent: a terminal of a given size, input through its line discipline,
resize, Ctrl-C, and reattaching to replay the output."""

from __future__ import annotations

import asyncio
import base64
import os
import re

import pytest

from corral.runtime.agent_client import AgentClient, AgentError
from tests.unit.agent.conftest import LocalAgent


class Term:
    """A PTY process followed through the agent's event stream, as a terminal client would."""

    def __init__(self, client: AgentClient, pid: int) -> None:
        self.client = client
        self.pid = pid
        self.cursor = -1
        self.output = b""
        self.exit: dict[str, object] | None = None

    async def expect(self, pattern: bytes, timeout: float = 20.0) -> re.Match[bytes]:
        """Read output until ``pattern`` matches what was read since the last match."""
        start = len(self.output)

        async def read() -> re.Match[bytes]:
            while True:
                found = re.search(pattern, self.output[start:])
                if found:
                    return found
                assert self.exit is None, f"exited before {pattern!r}: {self.output!r}"
                async for event in self.client.events(self.pid, after=self.cursor, follow=True):
                    self.cursor = event["seq"]
                    if event["type"] == "stdout":
                        self.output += base64.b64decode(event["data"])
                        if re.search(pattern, self.output[start:]):
                            break
                    elif event["type"] == "exit":
                        self.exit = event

        return await asyncio.wait_for(read(), timeout)

    async def wait_exit(self) -> dict[str, object]:
        async for event in self.client.events(self.pid, after=self.cursor, follow=True):
            self.cursor = event["seq"]
            if event["type"] == "stdout":
                self.output += base64.b64decode(event["data"])
            elif event["type"] == "exit":
                self.exit = event
        assert self.exit is not None
        return self.exit


async def foreground_child(shell_pid: int, comm: str, timeout: float = 10.0) -> int:
    """Wait until a child ``comm`` of ``shell_pid`` is its terminal's foreground process group
    (the shell forks it, then hands it the terminal); a Ctrl-C sent earlier would hit the shell."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            ppid, pgrp, tpgid = int(fields[1]), int(fields[2]), int(fields[5])
            if name == comm and ppid == shell_pid and tpgid == pgrp:
                return int(entry)
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {comm!r} became the foreground of shell {shell_pid}")


async def start(agent: LocalAgent, **spec: object) -> Term:
    pid = await agent.client.start_process({"pty": {"rows": 30, "cols": 100}, **spec})
    return Term(agent.client, pid)


async def test_command_on_a_pty_sees_a_terminal_of_its_size(agent: LocalAgent) -> None:
    term = await start(agent, shell="echo hi; tty; stty size; echo $TERM")
    exit_event = await term.wait_exit()
    assert exit_event["exit_code"] == 0
    lines = term.output.decode().splitlines()
    assert lines[0] == "hi"
    assert re.fullmatch(r"/dev/pts/\d+", lines[1])
    assert lines[2] == "30 100"
    assert lines[3] == "xterm-256color"
    info = await agent.client.get_process(term.pid)
    assert (info["pty"], info["rows"], info["cols"]) == (True, 30, 100)


async def test_shell_takes_input_resize_and_ctrl_c_and_can_be_reattached(
    agent: LocalAgent,
) -> None:
    term = await start(agent, cmd=["/bin/sh"], env={"PS1": "$ "})
    await term.client.send_stdin(term.pid, b"echo $((6*7))\n")
    await term.expect(rb"42\r\n")

    await term.client.resize(term.pid, 50, 132)
    await term.client.send_stdin(term.pid, b"stty size\n")
    await term.expect(rb"50 132")

    await term.client.send_stdin(term.pid, b"echo sleeping; sleep 100; echo after-sleep\n")
    await term.expect(rb"sleeping\r\n")
    await foreground_child(term.pid, "sleep")
    await term.client.send_stdin(term.pid, b"\x03")  # through the line discipline: SIGINT
    await term.client.send_stdin(term.pid, b"echo alive $((1+1))\n")
    await term.expect(rb"alive 2\r\n", timeout=10)  # well before the sleep's 100 s
    assert term.output.count(b"after-sleep\r\n") == 1  # only the typed line's echo
    listed = {p["pid"]: p for p in await agent.client.list_processes()}
    assert listed[term.pid]["running"] is True

    # A new client (the old one went away) replays the buffered output from the start.
    replay = Term(agent.client, term.pid)
    await replay.expect(rb"alive 2")
    assert b"42" in replay.output and b"50 132" in replay.output

    await term.client.send_stdin(term.pid, b"exit 3\n")
    exit_event = await term.wait_exit()
    assert exit_event["exit_code"] == 3


async def test_default_command_is_a_login_shell(agent: LocalAgent) -> None:
    term = await start(agent)
    await term.client.send_stdin(term.pid, b"echo shell=$0; exit\n")
    await term.expect(rb"shell=-?/bin/(ba)?sh")
    assert (await term.wait_exit())["exit_code"] == 0


async def test_pty_sizes_are_bounded_and_resize_needs_a_pty(agent: LocalAgent) -> None:
    with pytest.raises(AgentError) as bad:
        await agent.client.start_process({"shell": "true", "pty": {"rows": 0, "cols": 80}})
    assert bad.value.code == "bad_request"
    with pytest.raises(AgentError) as big:
        await agent.client.start_process({"shell": "true", "pty": {"rows": 24, "cols": 10**6}})
    assert big.value.code == "bad_request"
    pid = await agent.client.start_process({"shell": "sleep 30"})
    with pytest.raises(AgentError) as no_pty:
        await agent.client.resize(pid, 24, 80)
    assert no_pty.value.code == "conflict"
    await agent.client.signal(pid, "SIGKILL")


async def test_terminal_as_another_user_in_another_directory(agent: LocalAgent) -> None:
    term = await start(agent, shell="id -u; pwd; tty", user="nobody", cwd="/tmp")
    assert (await term.wait_exit())["exit_code"] == 0
    lines = term.output.decode().splitlines()
    assert lines[:2] == ["65534", "/tmp"]
    assert re.fullmatch(r"/dev/pts/\d+", lines[2])
