"""The in-sandbox agent, as the daemon sees it through ``AgentClient``: processes, then files."""

from __future__ import annotations

import ast
import asyncio
import base64
import hashlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.agent import AGENT_DIR
from corral.runtime import agent_client
from corral.runtime.agent_client import AgentClient, AgentError, AgentUnavailable
from corral.runtime.agent_http import AgentTransportError
from tests.unit.agent.conftest import LocalAgent

MiB = 1024 * 1024


@dataclass
class Run:
    stdout: bytes = b""
    stderr: bytes = b""
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def exit(self) -> dict[str, Any]:
        return self.events[-1]


async def run(client: AgentClient, **spec: Any) -> Run:
    """Run a process through the stream=true path and collect what a user would see."""
    result = Run()
    stdout, stderr = bytearray(), bytearray()
    async for event in client.stream_process(spec):
        result.events.append(event)
        if event["type"] == "stdout":
            stdout += base64.b64decode(event["data"])
        elif event["type"] == "stderr":
            stderr += base64.b64decode(event["data"])
    result.stdout, result.stderr = bytes(stdout), bytes(stderr)
    return result


async def collect(events: AsyncIterator[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event async for event in events]


def output_of(events: list[dict[str, Any]], kind: str = "stdout") -> bytes:
    return b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == kind)


# -- agent ---------------------------------------------------------------------------------------


async def test_health_answers_with_version_boot_id_and_pid(agent: LocalAgent) -> None:
    health = await agent.client.health()
    assert health["ok"] is True
    assert health["version"] == "1"
    assert health["pid"] == agent.pid
    assert len(health["boot_id"]) >= 16


async def test_wait_ready_names_the_agent_when_nothing_listens() -> None:
    async with AgentClient("127.0.0.1", 1) as client:
        with pytest.raises(AgentUnavailable, match=r"127\.0\.0\.1:1 did not answer"):
            await client.wait_ready(0.05)


# -- processes -----------------------------------------------------------------------------------


async def test_exec_argv_separates_stdout_stderr_and_reports_exit_code(agent: LocalAgent) -> None:
    result = await run(
        agent.client, cmd=["sh", "-c", 'echo "out $1"; echo "err $2" >&2; exit 7', "sh", "a b", "c"]
    )
    assert result.events[0] == {"seq": 0, "type": "start", "pid": result.events[0]["pid"]}
    assert result.stdout == b"out a b\n"
    assert result.stderr == b"err c\n"
    assert result.exit["type"] == "exit"
    assert result.exit["exit_code"] == 7
    assert result.exit["signal"] is None
    assert result.exit["timed_out"] is False
    seqs = [e["seq"] for e in result.events]
    assert seqs == sorted(set(seqs))


async def test_exec_shell_string_runs_through_sh(agent: LocalAgent) -> None:
    result = await run(agent.client, shell="for i in 1 2 3; do printf $i; done | wc -c")
    assert result.stdout.strip() == b"3"
    assert result.exit["exit_code"] == 0
    listed = await agent.client.get_process(result.events[0]["pid"])
    assert listed["cmd"] == ["/bin/sh", "-c", "for i in 1 2 3; do printf $i; done | wc -c"]


async def test_exec_needs_exactly_one_of_cmd_and_shell(agent: LocalAgent) -> None:
    with pytest.raises(AgentError) as info:
        await run(agent.client, cmd=["true"], shell="true")
    assert (info.value.code, info.value.status) == ("bad_request", 400)


async def test_environment_defaults_overrides_and_hides_agent_settings(agent: LocalAgent) -> None:
    result = await run(agent.client, cmd=["env"], env={"EXTRA": "1"})
    env = dict(line.split("=", 1) for line in result.stdout.decode().splitlines())
    assert env["CORRAL_TEST_DEFAULT"] == "from-agent-env"
    assert env["EXTRA"] == "1"
    assert not [name for name in env if name.startswith("CORRAL_AGENT_")]

    await agent.client.set_env({"ONLY": "this"})
    result = await run(agent.client, cmd=["env"])
    env = dict(line.split("=", 1) for line in result.stdout.decode().splitlines())
    assert env["ONLY"] == "this"
    assert "CORRAL_TEST_DEFAULT" not in env
    assert env["PATH"] and env["HOME"]


async def test_cwd_is_honoured_and_relative_paths_start_at_root(
    agent: LocalAgent, tmp_path: Path
) -> None:
    assert (await run(agent.client, cmd=["pwd"], cwd=str(tmp_path))).stdout == (
        f"{tmp_path}\n".encode()
    )
    assert (await run(agent.client, cmd=["pwd"], cwd="tmp")).stdout == b"/tmp\n"
    assert (await run(agent.client, cmd=["pwd"])).stdout == b"/\n"


async def test_death_by_signal_is_reported_as_signal(agent: LocalAgent) -> None:
    result = await run(agent.client, shell="kill -KILL $$")
    assert result.exit["exit_code"] is None
    assert result.exit["signal"] == 9


async def test_missing_program_bad_cwd_and_unknown_user_are_exec_failed(
    agent: LocalAgent, tmp_path: Path
) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"cmd": ["no-such-program-xyz"]}, "no-such-program-xyz"),
        ({"cmd": [str(tmp_path)]}, str(tmp_path)),
        ({"cmd": ["true"], "cwd": str(tmp_path / "missing")}, str(tmp_path / "missing")),
        ({"cmd": ["true"], "user": "no-such-user-xyz"}, "no-such-user-xyz"),
    ]
    for spec, named in cases:
        with pytest.raises(AgentError) as info:
            await run(agent.client, **spec)
        assert (info.value.code, info.value.status) == ("exec_failed", 400), spec
        assert named in str(info.value)
        with pytest.raises(AgentError) as info:
            await agent.client.start_process(spec)
        assert info.value.code == "exec_failed"
    assert await agent.client.list_processes() == []


async def test_stdin_pipe_feeds_the_process_until_closed(agent: LocalAgent) -> None:
    pid = await agent.client.start_process({"cmd": ["cat"], "stdin": True})
    await agent.client.send_stdin(pid, b"hello ")
    await agent.client.send_stdin(pid, b"\x00\xffworld")
    await agent.client.close_stdin(pid)
    events = await collect(agent.client.events(pid, follow=True))
    assert output_of(events) == b"hello \x00\xffworld"
    assert events[-1]["exit_code"] == 0
    with pytest.raises(AgentError) as info:
        await agent.client.send_stdin(pid, b"late")
    assert (info.value.code, info.value.status) == ("conflict", 409)


async def test_stdin_is_dev_null_unless_asked(agent: LocalAgent) -> None:
    result = await run(agent.client, cmd=["cat"])
    assert result.stdout == b""
    assert result.exit["exit_code"] == 0
    with pytest.raises(AgentError) as info:
        await agent.client.send_stdin(result.events[0]["pid"], b"x")
    assert info.value.code == "conflict"


async def test_timeout_kills_the_whole_process_group(agent: LocalAgent) -> None:
    started = time.monotonic()
    result = await run(agent.client, shell="sleep 30 & sleep 30; echo never", timeout=0.3)
    assert time.monotonic() - started < 5
    assert result.exit["timed_out"] is True
    assert result.exit["signal"] == 9
    assert result.stdout == b""


async def test_a_short_timeout_fires_behind_a_long_one(agent: LocalAgent) -> None:
    slow = await agent.client.start_process({"cmd": ["sleep", "30"], "timeout": 60})
    started = time.monotonic()
    result = await run(agent.client, cmd=["sleep", "30"], timeout=0.2)
    assert result.exit["timed_out"] is True
    assert time.monotonic() - started < 5
    assert (await agent.client.get_process(slow))["running"] is True


async def test_signal_goes_to_the_process_group(agent: LocalAgent) -> None:
    pid = await agent.client.start_process({"shell": "sleep 30 & wait"})
    await agent.client.signal(pid, "SIGTERM")
    events = await collect(agent.client.events(pid))
    assert events[-1]["signal"] == 15
    assert events[-1]["timed_out"] is False
    with pytest.raises(AgentError) as info:
        await agent.client.signal(pid, 15)
    assert info.value.code == "conflict"
    with pytest.raises(AgentError) as info:
        await agent.client.signal(pid, "SIGNOPE")
    assert info.value.code == "bad_request"


async def test_background_process_can_be_rejoined_after_a_seen_event(agent: LocalAgent) -> None:
    pid = await agent.client.start_process(
        {"shell": "echo one; read x; echo two; read y; echo three", "stdin": True, "tag": "bg"}
    )
    first = []
    async for event in agent.client.events(pid, follow=True):
        first.append(event)
        if event["type"] == "stdout":
            break  # the daemon went away mid-stream
    assert output_of(first) == b"one\n"

    listed = await agent.client.list_processes()
    assert [(p["pid"], p["tag"], p["running"]) for p in listed] == [(pid, "bg", True)]

    await agent.client.send_stdin(pid, b"go\ngo\n")
    rest = await collect(agent.client.events(pid, after=first[-1]["seq"], follow=True))
    assert all(e["seq"] > first[-1]["seq"] for e in rest)
    assert output_of(rest) == b"two\nthree\n"
    assert rest[-1]["type"] == "exit"

    replay = await collect(agent.client.events(pid, follow=False))
    assert output_of(replay) == b"one\ntwo\nthree\n"
    info = await agent.client.get_process(pid)
    assert info["running"] is False
    assert info["exit_code"] == 0
    assert info["ended_at"] >= info["started_at"]


async def test_events_without_follow_return_what_is_buffered(agent: LocalAgent) -> None:
    pid = await agent.client.start_process({"shell": "echo ready; exec sleep 30"})
    for _ in range(200):
        events = await collect(agent.client.events(pid, follow=False))
        if output_of(events):
            break
        await asyncio.sleep(0.01)
    assert [e["type"] for e in events] == ["start", "stdout"]
    assert await collect(agent.client.events(pid, after=events[-1]["seq"], follow=False)) == []


async def test_forget_drops_finished_processes_only(agent: LocalAgent) -> None:
    pid = await agent.client.start_process({"cmd": ["sleep", "30"]})
    with pytest.raises(AgentError) as info:
        await agent.client.forget(pid)
    assert (info.value.code, info.value.status) == ("conflict", 409)
    await agent.client.signal(pid, "KILL")
    await collect(agent.client.events(pid))
    await agent.client.forget(pid)
    for call in (agent.client.get_process(pid), agent.client.forget(pid)):
        with pytest.raises(AgentError) as info:
            await call
        assert (info.value.code, info.value.status) == ("not_found", 404)
    with pytest.raises(AgentError, match="no process"):
        await collect(agent.client.events(pid))


async def test_a_stream_with_forget_drops_the_process_once_its_exit_is_sent(
    agent: LocalAgent,
) -> None:
    events = await collect(agent.client.stream_process({"cmd": ["echo", "hi"]}, forget=True))
    assert [e["type"] for e in events] == ["start", "stdout", "exit"]
    assert base64.b64decode(events[1]["data"]) == b"hi\n"
    pid = events[0]["pid"]
    with pytest.raises(AgentError) as info:
        await agent.client.get_process(pid)
    assert (info.value.code, info.value.status) == ("not_found", 404)
    assert pid not in [p["pid"] for p in await agent.client.list_processes()]


async def test_a_stream_with_forget_cut_before_the_exit_keeps_the_process(
    agent: LocalAgent,
) -> None:
    stream = agent.client.stream_process({"shell": "echo ready; exec sleep 30"}, forget=True)
    start = await anext(stream)
    assert (await anext(stream))["type"] == "stdout"  # running, and no exit to come yet
    await stream.aclose()  # the caller went away: it reconnects by pid
    pid = start["pid"]
    await agent.client.signal(pid, "KILL")
    events = await collect(agent.client.events(pid))
    assert events[-1]["type"] == "exit" and events[-1]["signal"] == signal.SIGKILL
    assert output_of(events) == b"ready\n"
    assert (await agent.client.get_process(pid))["running"] is False


async def test_a_stream_without_forget_keeps_the_process(agent: LocalAgent) -> None:
    events = await collect(agent.client.stream_process({"cmd": ["true"]}))
    info = await agent.client.get_process(events[0]["pid"])
    assert (info["running"], info["exit_code"]) == (False, 0)


async def test_50_mb_of_binary_output_streams_losslessly(agent: LocalAgent, tmp_path: Path) -> None:
    source = tmp_path / "random.bin"
    with open(source, "wb") as f:
        for _ in range(50):
            f.write(os.urandom(MiB))
    digest, size, kinds = hashlib.sha256(), 0, set()
    async for event in agent.client.stream_process({"cmd": ["cat", str(source)]}):
        kinds.add(event["type"])
        if event["type"] == "stdout":
            chunk = base64.b64decode(event["data"])
            digest.update(chunk)
            size += len(chunk)
    assert kinds == {"start", "stdout", "exit"}  # a live follower slows the producer, no drops
    assert size == 50 * MiB
    assert digest.hexdigest() == hashlib.sha256(source.read_bytes()).hexdigest()


async def test_output_beyond_16_mib_without_a_reader_is_reported_truncated(
    agent: LocalAgent,
) -> None:
    pid = await agent.client.start_process({"shell": "head -c 20971520 /dev/zero; echo end >&2"})
    for _ in range(500):
        if not (await agent.client.get_process(pid))["running"]:
            break
        await asyncio.sleep(0.01)
    events = await collect(agent.client.events(pid, follow=False))
    assert events[0]["type"] == "start"
    assert events[1]["type"] == "truncated"
    kept = len(output_of(events))
    assert kept <= 16 * MiB
    assert events[1]["dropped_bytes"] + kept == 20 * MiB
    assert output_of(events, "stderr") == b"end\n"
    assert events[-1]["type"] == "exit"

    later = await collect(agent.client.events(pid, after=events[1]["seq"], follow=False))
    assert "truncated" not in [e["type"] for e in later]


async def test_reaper_matches_exit_codes_under_a_burst_of_50_processes(agent: LocalAgent) -> None:
    results = await asyncio.gather(
        *(run(agent.client, shell=f"echo {n}; exit {n}") for n in range(50))
    )
    for n, result in enumerate(results):
        assert result.stdout == f"{n}\n".encode()
        assert result.exit["exit_code"] == n


async def test_orphans_of_a_double_fork_are_adopted_and_reaped(agent: LocalAgent) -> None:
    result = await run(agent.client, shell="(sleep 0.3 >/dev/null 2>&1 & echo $!)")
    orphan = int(result.stdout)
    assert result.exit["exit_code"] == 0
    status = Path(f"/proc/{orphan}/status").read_text()
    assert f"PPid:\t{agent.pid}\n" in status  # adopted by the agent, as PID 1 would be
    for _ in range(300):
        if not Path(f"/proc/{orphan}").exists():
            break
        await asyncio.sleep(0.01)
    assert not Path(f"/proc/{orphan}").exists(), "the orphan was left a zombie"


# -- files ---------------------------------------------------------------------------------------


async def test_file_round_trip_text_and_binary(agent: LocalAgent, tmp_path: Path) -> None:
    payload = bytes(range(256)) * 1000
    written = await agent.client.write_file(str(tmp_path / "bin"), payload, mode=0o600)
    assert written == {"path": str(tmp_path / "bin"), "size": len(payload)}
    assert (tmp_path / "bin").read_bytes() == payload
    assert (tmp_path / "bin").stat().st_mode & 0o777 == 0o600
    chunks = [c async for c in agent.client.read_file(str(tmp_path / "bin"))]
    assert b"".join(chunks) == payload

    await agent.client.write_file(str(tmp_path / "empty"), b"")
    assert [c async for c in agent.client.read_file(str(tmp_path / "empty"))] == [b""]


async def test_pseudo_files_are_read_whole_and_fifos_refused(
    agent: LocalAgent, tmp_path: Path
) -> None:
    version = b"".join([c async for c in agent.client.read_file("/proc/version")])
    assert version == Path("/proc/version").read_bytes() != b""
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(AgentError) as info:
        await agent.client.read_file(str(tmp_path / "fifo")).__anext__()
    assert (info.value.code, info.value.status) == ("bad_request", 400)
    assert "not a regular file" in str(info.value)


async def test_200_mb_file_streams_both_ways(agent: LocalAgent, tmp_path: Path) -> None:
    sent = hashlib.sha256()

    async def produce() -> AsyncIterator[bytes]:
        for _ in range(200):
            chunk = os.urandom(MiB)
            sent.update(chunk)
            yield chunk

    path = str(tmp_path / "deep" / "big.bin")
    written = await agent.client.write_file(path, produce(), parents=True)
    assert written["size"] == 200 * MiB
    received, largest = hashlib.sha256(), 0
    async for chunk in agent.client.read_file(path):
        received.update(chunk)
        largest = max(largest, len(chunk))
    assert received.hexdigest() == sent.hexdigest()
    assert largest <= MiB
    assert (await agent.client.stat(path))["size"] == 200 * MiB


async def test_failed_upload_leaves_the_old_file_alone(agent: LocalAgent, tmp_path: Path) -> None:
    target = tmp_path / "keep.txt"
    target.write_bytes(b"old")

    async def broken() -> AsyncIterator[bytes]:
        yield b"new" * 1000
        raise RuntimeError("client gave up")

    with pytest.raises(RuntimeError, match="client gave up"):
        await agent.client.write_file(str(target), broken())
    for _ in range(200):
        if sorted(p.name for p in tmp_path.iterdir()) == ["agent.log", "keep.txt"]:
            break
        await asyncio.sleep(0.01)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.log", "keep.txt"]
    assert target.read_bytes() == b"old"


async def test_stat_list_mkdir_move_remove(agent: LocalAgent, tmp_path: Path) -> None:
    c, root = agent.client, str(tmp_path)
    assert await c.mkdir(f"{root}/a/b") is True
    assert await c.mkdir(f"{root}/a/b") is False
    await c.write_file(f"{root}/a/b/f.txt", b"12345")
    os.symlink("b/f.txt", tmp_path / "a" / "link")

    stat = await c.stat(f"{root}/a/b/f.txt")
    assert stat["name"] == "f.txt"
    assert (stat["type"], stat["size"], stat["mode"]) == ("file", 5, 0o644)
    link = await c.stat(f"{root}/a/link")
    assert (link["type"], link["target"]) == ("symlink", "b/f.txt")

    top = await c.list_dir(f"{root}/a")
    assert [(e["name"], e["type"]) for e in top] == [("b", "dir"), ("link", "symlink")]
    deep = await c.list_dir(f"{root}/a", depth=2)
    assert [e["path"] for e in deep] == [f"{root}/a/b", f"{root}/a/b/f.txt", f"{root}/a/link"]

    moved = await c.move(f"{root}/a/b/f.txt", f"{root}/g.txt")
    assert (moved["path"], moved["size"]) == (f"{root}/g.txt", 5)
    assert not (tmp_path / "a" / "b" / "f.txt").exists()

    await c.write_file(f"{root}/a/b/x", b"x")
    with pytest.raises(AgentError) as info:
        await c.remove(f"{root}/a")
    assert (info.value.code, info.value.status) == ("conflict", 409)
    assert "recursive" in str(info.value)
    await c.remove(f"{root}/a", recursive=True)
    await c.remove(f"{root}/g.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.log"]


async def test_file_errors_name_the_path_and_carry_codes(agent: LocalAgent, tmp_path: Path) -> None:
    c, missing = agent.client, str(tmp_path / "missing")
    (tmp_path / "file").write_bytes(b"x")

    async def code_of(call: Any) -> tuple[str, int | None, str]:
        with pytest.raises(AgentError) as info:
            await call
        return info.value.code, info.value.status, str(info.value)

    reader = c.read_file(missing)
    code, status, message = await code_of(reader.__anext__())
    assert (code, status) == ("not_found", 404)
    assert missing in message
    assert (await code_of(c.stat(missing)))[:2] == ("not_found", 404)
    assert (await code_of(c.list_dir(missing)))[:2] == ("not_found", 404)
    assert (await code_of(c.remove(missing)))[:2] == ("not_found", 404)
    assert (await code_of(c.move(missing, f"{missing}2")))[:2] == ("not_found", 404)
    assert (await code_of(c.write_file(f"{missing}/f", b"x" * 100_000)))[:2] == (
        "not_found",
        404,
    )
    assert (await code_of(c.mkdir(f"{missing}/a/b", parents=False)))[:2] == ("not_found", 404)
    assert (await code_of(c.list_dir(str(tmp_path / "file"))))[0] == "not_a_directory"
    assert (await code_of(c.read_file(str(tmp_path)).__anext__()))[0] == "is_a_directory"
    assert (await code_of(c.write_file(str(tmp_path), b"x")))[0] == "is_a_directory"
    assert (await code_of(c.mkdir(str(tmp_path / "file"))))[:2] == ("exists", 409)
    # The connection stays usable after every early answer.
    assert (await c.health())["ok"] is True


async def test_non_utf8_names_travel_as_surrogateescape(agent: LocalAgent, tmp_path: Path) -> None:
    raw = os.fsencode(tmp_path) + b"/caf\xe9 100%+&?.txt"
    name = raw.decode("utf-8", "surrogateescape")
    written = await agent.client.write_file(name, b"latin-1 name")
    assert written["path"] == name
    assert b"caf\xe9 100%+&?.txt" in os.listdir(os.fsencode(tmp_path))
    assert b"".join([c async for c in agent.client.read_file(name)]) == b"latin-1 name"
    listed = await agent.client.list_dir(str(tmp_path))
    assert name in [e["path"] for e in listed]
    assert (await agent.client.stat(name))["name"] == "caf\udce9 100%+&?.txt"
    moved = await agent.client.move(name, name + "\udcff")
    assert moved["path"] == name + "\udcff"
    result = await run(agent.client, cmd=["cat", name + "\udcff"])
    assert result.stdout == b"latin-1 name"


async def test_paths_with_dot_dot_are_normalised(agent: LocalAgent, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    written = await agent.client.write_file(f"{tmp_path}/sub/../up.txt", b"x")
    assert written["path"] == f"{tmp_path}/up.txt"
    assert (tmp_path / "up.txt").read_bytes() == b"x"
    stat = await agent.client.stat(f"{tmp_path}/sub/../../{tmp_path.name}/up.txt")
    assert stat["path"] == f"{tmp_path}/up.txt"
    root = await agent.client.stat("/../../..")
    assert (root["path"], root["name"], root["type"]) == ("/", "/", "dir")


# -- packaging and the client's error boundary ---------------------------------------------------


def test_agent_imports_only_the_standard_library_and_itself() -> None:
    modules = {path.stem for path in AGENT_DIR.glob("*.py")} - {"__init__"}
    imported = set()
    for path in AGENT_DIR.glob("*.py"):
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and node.module in modules, f"{path.name}: {node.module}"
            elif isinstance(node, ast.ImportFrom):
                imported.add((node.module or "").split(".")[0])
    # agent.py imports the package as ``agent`` (from the zipapp or the source tree).
    assert imported - {"__future__", "agent"} <= set(sys.stdlib_module_names)
    package = ast.parse((AGENT_DIR / "__init__.py").read_text())
    assert not [
        n
        for n in ast.walk(package)
        if isinstance(n, ast.ImportFrom) and "corral" in (n.module or "")
    ]


def test_agent_client_exports() -> None:
    assert sorted(agent_client.__all__) == ["AgentClient", "AgentError", "AgentUnavailable"]
    assert issubclass(AgentUnavailable, AgentError)


async def test_agent_dying_mid_stream_raises_agent_unavailable(agent: LocalAgent) -> None:
    pid = await agent.client.start_process({"shell": "echo up; exec sleep 30"})
    with pytest.raises(AgentUnavailable, match="unavailable") as info:
        async for event in agent.client.events(pid, follow=True):
            if event["type"] == "stdout":
                # The agent first: killed second, it could still send the exit event.
                os.kill(agent.pid, signal.SIGKILL)
                os.killpg(pid, signal.SIGKILL)
    assert isinstance(info.value.__cause__, AgentTransportError)
    assert (info.value.code, info.value.status) == ("unavailable", None)


async def test_foreign_error_answers_become_agent_errors() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>bad gateway</html>")

    async with AgentClient("10.0.0.1", transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(AgentError) as info:
            await client.stat("/etc")
    assert (info.value.code, info.value.status) == ("internal", 502)
    assert "stat '/etc'" in str(info.value)


async def test_programs_are_found_on_the_childs_path_and_run_in_their_cwd(
    agent: LocalAgent, tmp_path: Path
) -> None:
    tool = tmp_path / "bin" / "corral-test-tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho tool in $(pwd)\n")
    tool.chmod(0o755)
    (tmp_path / "bin" / "not-executable").write_text("#!/bin/sh\n")
    env = {"PATH": f"/nonexistent:{tool.parent}:/usr/bin:/bin"}
    here = await run(agent.client, cmd=["corral-test-tool"], env=env)
    assert (here.stdout, here.exit["exit_code"]) == (b"tool in /\n", 0)
    there = await run(agent.client, cmd=["corral-test-tool"], env=env, cwd=str(tmp_path))
    assert there.stdout == f"tool in {tmp_path}\n".encode()
    with pytest.raises(AgentError) as denied:
        await run(agent.client, cmd=["not-executable"], env=env)
    assert denied.value.code == "exec_failed" and "Permission denied" in str(denied.value)
