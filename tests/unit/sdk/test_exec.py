"""exec: streaming output, callbacks, stdin, reconnecting after a broken stream, exit codes."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from corral.sdk import (
    AsyncSandbox,
    ConnectionFailed,
    ExecFailed,
    ProcessEvent,
    Sandbox,
)
from corral.sdk.testing import CommandOutcome, FakeDaemon


@pytest.fixture
def fake() -> FakeDaemon:
    return FakeDaemon()


@pytest.fixture
def sbx(fake: FakeDaemon) -> Iterator[Sandbox]:
    with Sandbox.create(api_key=fake.api_key, transport=fake.transport) as sandbox:
        yield sandbox


def _last_exec_body(fake: FakeDaemon) -> dict[str, object]:
    request = next(r for r in reversed(fake.requests) if r.url.path.endswith("/exec"))
    body: dict[str, object] = json.loads(request.content)
    return body


def test_str_runs_through_the_shell_and_list_is_argv(fake: FakeDaemon, sbx: Sandbox) -> None:
    result = sbx.exec("echo hello world")
    assert _last_exec_body(fake)["shell"] == "echo hello world"
    assert (result.exit_code, result.stdout, result.stderr) == (0, "hello world\n", "")
    sbx.exec(["echo", "a b"], env={"K": "V"}, cwd="/tmp", user="nobody", timeout=5)
    assert _last_exec_body(fake) == {
        "cmd": ["echo", "a b"],
        "env": {"K": "V"},
        "cwd": "/tmp",
        "user": "nobody",
        "timeout": 5,
    }


def test_callbacks_get_decoded_text_as_it_streams(fake: FakeDaemon, sbx: Sandbox) -> None:
    # "é" is two bytes; the fake splits output in half, right through it.
    fake.run = lambda argv, stdin, timeout: CommandOutcome(stdout="aé".encode(), stderr=b"oops")
    out: list[str] = []
    err: list[str] = []
    result = sbx.exec("anything", on_stdout=out.append, on_stderr=err.append)
    assert out == ["a", "é"]
    assert "".join(err) == "oops"
    assert result.stdout_bytes == "aé".encode()
    assert result.stdout == "aé"


def test_exit_code_timeout_and_signal(fake: FakeDaemon, sbx: Sandbox) -> None:
    assert sbx.exec("exit 3").exit_code == 3
    timed = sbx.exec(["sleep", "10"], timeout=1)
    assert timed.timed_out
    assert timed.signal == 9
    assert timed.exit_code == 128 + 9


def test_command_that_cannot_start_raises_exec_failed(sbx: Sandbox) -> None:
    with pytest.raises(ExecFailed, match="not found"):
        sbx.exec(["nosuchcmd"])


def test_stdin_is_sent_then_closed(fake: FakeDaemon, sbx: Sandbox) -> None:
    result = sbx.exec("cat", stdin=iter([b"line 1\n", "line 2\n"]))
    assert result.stdout == "line 1\nline 2\n"
    body = _last_exec_body(fake)
    assert body["stdin"] is True
    assert body["background"] is True
    paths = [r.url.path.rsplit("/", 1)[-1] for r in fake.requests]
    assert paths.count("stdin") == 2
    assert "close-stdin" in paths


def test_broken_stream_reconnects_after_the_last_seq(fake: FakeDaemon, sbx: Sandbox) -> None:
    fake.run = lambda argv, stdin, timeout: CommandOutcome(stdout=b"0123456789", exit_code=4)
    fake.break_streams_after = 2  # start + first half of stdout, then the connection drops
    out: list[str] = []
    result = sbx.exec("count", on_stdout=out.append)
    assert (result.stdout, result.exit_code) == ("0123456789", 4)
    assert out == ["01234", "56789"]  # nothing lost, nothing repeated
    resumed = [r for r in fake.requests if r.url.path.endswith("/events")]
    assert len(resumed) == 1
    assert resumed[0].url.params["after"] == "1"


def test_gives_up_after_repeated_breaks_without_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream that always breaks before any event: the budget runs out, ConnectionFailed."""
    monkeypatch.setattr("corral.sdk.process._BACKOFF_SECONDS", (0.0,))
    start = json.dumps({"seq": 0, "type": "start", "pid": 7}).encode() + b"\n"
    calls = {"events": 0}

    async def broken(prefix: bytes) -> AsyncIterator[bytes]:
        if prefix:
            yield prefix
        raise httpx.ReadError("connection reset")

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/exec"):
            return httpx.Response(200, content=broken(start))
        calls["events"] += 1
        return httpx.Response(200, content=broken(b""))

    sandbox = Sandbox(_handle(handler))
    with pytest.raises(ConnectionFailed):
        sandbox.exec("true")
    assert calls["events"] == 6  # RECONNECT_ATTEMPTS + 1


def _handle(handler):  # type: ignore[no-untyped-def]
    from corral.sdk import AsyncClient

    client = AsyncClient(api_key="k", transport=httpx.MockTransport(handler))
    return client.sandbox("sbx-x")


def test_background_process_wait_events_and_kill(fake: FakeDaemon, sbx: Sandbox) -> None:
    process = sbx.exec_background(["echo", "bg"], tag="job")
    assert _last_exec_body(fake)["tag"] == "job"
    result = process.wait()
    assert (result.stdout, result.pid) == ("bg\n", process.pid)
    types = [event.type for event in process.events()]
    assert types == ["start", "stdout", "stdout", "exit"]  # the fake splits output
    assert [p.pid for p in sbx.processes()] == [process.pid]

    waiting = sbx.exec_background("cat", stdin=True)
    waiting.send_stdin("partial")
    waiting.kill()
    killed = waiting.wait()
    assert killed.signal == 9
    signal_request = [r for r in fake.requests if r.url.path.endswith("/signal")][-1]
    assert json.loads(signal_request.content) == {"signal": "SIGKILL"}


def test_on_event_sees_raw_bytes(fake: FakeDaemon, sbx: Sandbox) -> None:
    fake.run = lambda argv, stdin, timeout: CommandOutcome(stdout=b"\xff\x00binary")
    events: list[ProcessEvent] = []
    result = sbx.exec("dump", on_event=events.append)
    assert b"".join(e.data for e in events if e.type == "stdout") == b"\xff\x00binary"
    assert result.stdout_bytes == b"\xff\x00binary"


async def test_async_exec_with_async_callbacks(fake: FakeDaemon) -> None:
    seen: list[str] = []

    async def collect(text: str) -> None:
        seen.append(text)

    async with AsyncSandbox.create(api_key=fake.api_key, transport=fake.transport) as sandbox:
        result = await sandbox.exec(["echo", "async"], on_stdout=collect)
        assert result.stdout == "async\n"
        assert "".join(seen) == "async\n"


def test_event_data_is_base64_on_the_wire() -> None:
    from corral.sdk._http import parse_event

    raw = {"seq": 3, "type": "stdout", "data": base64.b64encode(b"hi").decode()}
    assert parse_event(raw) == ProcessEvent(seq=3, type="stdout", data=b"hi")
