"""The official ``e2b`` SDK, unchanged, against a real corral daemon (sync and async).

The SDK is pointed at the daemon only by the settings ``corral e2b env`` prints.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import httpx
import pytest
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    FileNotFoundException,
    NotFoundException,
    PtySize,
    Sandbox,
    SandboxException,
    SandboxQuery,
    TimeoutException,
)
from e2b.sandbox.filesystem.filesystem import FileType
from e2b.sandbox.filesystem.watch_handle import FilesystemEvent

from tests.e2e.conftest import Daemon
from tests.e2e.workloads import wait_until

ALL_TRAFFIC = "0.0.0.0/0"

KEY_SHAPE = re.compile(r"^e2b_[0-9a-f]{40}$")


@pytest.fixture(scope="module")
def e2b_env(daemon: Daemon) -> dict[str, str]:
    out = daemon.cli("e2b", "env")
    assert out.returncode == 0, out.stderr.decode()
    settings = {}
    for line in out.stdout.decode().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        settings[name] = value.strip("'")
    return settings


@pytest.fixture(autouse=True)
def _e2b_settings(e2b_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in e2b_env.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def sbx(_e2b_settings: None) -> Iterator[Sandbox]:
    sandbox = Sandbox.create("base", timeout=300, metadata={"suite": "e2b"})
    try:
        yield sandbox
    finally:
        Sandbox.kill(sandbox.sandbox_id)


def test_env_prints_the_settings_and_an_e2b_shaped_key(
    daemon: Daemon, e2b_env: dict[str, str]
) -> None:
    assert e2b_env["E2B_API_URL"] == daemon.url
    assert e2b_env["E2B_SANDBOX_URL"] == daemon.url
    assert KEY_SHAPE.match(e2b_env["E2B_API_KEY"]), e2b_env["E2B_API_KEY"]
    assert KEY_SHAPE.match(daemon.key)


def test_lifecycle_info_list_timeout_kill(daemon: Daemon) -> None:
    sandbox = Sandbox.create("base", timeout=120, metadata={"who": "lifecycle"}, envs={"X": "1"})
    try:
        info = sandbox.get_info()
        assert (info.sandbox_id, info.template_id, info.metadata) == (
            sandbox.sandbox_id,
            "base",
            {"who": "lifecycle"},
        )
        assert info.state.value == "running"
        assert 100 < (info.end_at - info.started_at).total_seconds() <= 121
        sandbox.set_timeout(600)
        assert (sandbox.get_info().end_at - info.started_at).total_seconds() > 590
        listed = Sandbox.list(query=SandboxQuery(metadata={"who": "lifecycle"})).next_items()
        assert [s.sandbox_id for s in listed] == [sandbox.sandbox_id]
        other = Sandbox.create("base", timeout=60)
        try:
            pages = Sandbox.list(limit=1)
            seen = []
            while pages.has_next:
                seen.append([s.sandbox_id for s in pages.next_items()])
            assert len(seen) >= 2 and all(len(page) == 1 for page in seen)
            assert {sandbox.sandbox_id, other.sandbox_id} <= {p[0] for p in seen}
            newest = Sandbox.list(limit=1, order="desc").next_items()
            assert [s.sandbox_id for s in newest] == [other.sandbox_id]
            later = SandboxQuery(started_after=other.get_info().started_at, template="base")
            assert [s.sandbox_id for s in Sandbox.list(query=later).next_items()] == [
                other.sandbox_id
            ]
        finally:
            other.kill()
        assert sandbox.commands.run("echo $X").stdout == "1\n"
        again = Sandbox.connect(sandbox.sandbox_id)
        assert again.commands.run("echo same").stdout == "same\n"
        assert sandbox.is_running()
    finally:
        assert Sandbox.kill(sandbox.sandbox_id) is True
    assert Sandbox.kill(sandbox.sandbox_id) is False
    assert not sandbox.is_running()
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sandbox.sandbox_id)
    # The daemon saw it too, through its own API.
    with daemon.client() as client:
        assert client.get(f"/v1/sandboxes/{sandbox.sandbox_id}").json()["state"] == "killed"


def test_timeout_pauses_and_a_call_resumes(daemon: Daemon) -> None:
    sandbox = Sandbox.create(
        "base", timeout=2, lifecycle={"on_timeout": "pause", "auto_resume": True}
    )
    try:
        with daemon.client() as client:
            record = client.get(f"/v1/sandboxes/{sandbox.sandbox_id}").json()
        assert (record["on_timeout"], record["auto_wake"]) == ("park", True)
        deadline = time.monotonic() + 30
        while Sandbox.get_info(sandbox.sandbox_id).state.value != "paused":
            assert time.monotonic() < deadline, "the sandbox was not paused at its timeout"
            time.sleep(0.2)
        resumed = Sandbox.connect(sandbox.sandbox_id, timeout=120)
        assert resumed.commands.run("echo resumed").stdout == "resumed\n"
    finally:
        Sandbox.kill(sandbox.sandbox_id)


def test_commands_foreground(sbx: Sandbox) -> None:
    out: list[str] = []
    err: list[str] = []
    result = sbx.commands.run(
        "echo $A-$B; pwd; id -un; echo oops >&2",
        envs={"A": "1", "B": "2"},
        cwd="/usr",
        user="nobody",
        on_stdout=out.append,
        on_stderr=err.append,
    )
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["1-2", "/usr", "nobody"]
    assert "".join(out) == result.stdout
    assert "".join(err) == result.stderr == "oops\n"
    with pytest.raises(CommandExitException) as failed:
        sbx.commands.run("echo partial; exit 3")
    assert (failed.value.exit_code, failed.value.stdout) == (3, "partial\n")
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 30", timeout=1)


def test_many_megabytes_of_output(sbx: Sandbox) -> None:
    seen = [0]

    def count(chunk: str) -> None:
        seen[0] += len(chunk)

    result = sbx.commands.run("head -c 24000000 /dev/zero | base64 -w 0", on_stdout=count)
    assert len(result.stdout) == seen[0] == 32_000_000
    assert set(result.stdout) == {"A"}


def test_commands_background_stdin_list_connect_kill(sbx: Sandbox) -> None:
    handle = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(handle.pid, "through stdin\n")
    listed = {p.pid: p for p in sbx.commands.list()}
    assert handle.pid in listed
    assert listed[handle.pid].cmd == "/bin/bash"
    sbx.commands.close_stdin(handle.pid)
    result = handle.wait()
    assert result.stdout == "through stdin\n"

    sleeper = sbx.commands.run("echo started; touch /tmp/ready; sleep 300", background=True)
    deadline = time.monotonic() + 10
    while not sbx.files.exists("/tmp/ready") and time.monotonic() < deadline:
        pass
    attached = sbx.commands.connect(sleeper.pid)
    assert sbx.commands.kill(sleeper.pid) is True
    with pytest.raises(CommandExitException) as killed:
        attached.wait()
    assert "started\n" in killed.value.stdout
    assert sleeper.pid not in {p.pid for p in sbx.commands.list()}
    assert sbx.commands.kill(999999) is False


def test_files(sbx: Sandbox) -> None:
    info = sbx.files.write("/tmp/e2b/a.txt", "hello")
    assert (info.name, info.path, info.type) == ("a.txt", "/tmp/e2b/a.txt", FileType.FILE)
    assert sbx.files.read("/tmp/e2b/a.txt") == "hello"
    payload = bytes(range(256)) * 4096
    sbx.files.write("/tmp/e2b/blob.bin", payload)
    assert bytes(sbx.files.read("/tmp/e2b/blob.bin", format="bytes")) == payload
    written = sbx.files.write_files(
        [{"path": "/tmp/e2b/m1.txt", "data": "one"}, {"path": "/tmp/e2b/m2.txt", "data": b"two"}]
    )
    assert [w.path for w in written] == ["/tmp/e2b/m1.txt", "/tmp/e2b/m2.txt"]
    assert sbx.files.read("/tmp/e2b/m2.txt") == "two"
    names = sorted(e.name for e in sbx.files.list("/tmp/e2b"))
    assert names == ["a.txt", "blob.bin", "m1.txt", "m2.txt"]
    assert sbx.files.exists("/tmp/e2b/a.txt")
    assert not sbx.files.exists("/tmp/e2b/nope")
    stat = sbx.files.get_info("/tmp/e2b/a.txt")
    assert (stat.size, stat.type, stat.permissions) == (5, FileType.FILE, "-rw-r--r--")
    assert sbx.files.make_dir("/tmp/e2b/sub/deeper") is True
    assert sbx.files.make_dir("/tmp/e2b/sub/deeper") is False
    moved = sbx.files.rename("/tmp/e2b/a.txt", "/tmp/e2b/sub/b.txt")
    assert moved.path == "/tmp/e2b/sub/b.txt"
    assert sbx.files.read("/tmp/e2b/sub/b.txt") == "hello"
    sbx.files.remove("/tmp/e2b/sub")
    assert not sbx.files.exists("/tmp/e2b/sub")
    with pytest.raises(NotFoundException):
        sbx.files.read("/tmp/e2b/sub/b.txt")
    sbx.files.write("/tmp/e2b/gz.bin", payload, gzip=True)
    assert bytes(sbx.files.read("/tmp/e2b/gz.bin", format="bytes", gzip=True)) == payload
    with open(__file__, "rb") as handle:  # a file-like object goes as an octet-stream upload
        sbx.files.write("/tmp/e2b/self.py", handle)
    with open(__file__, "rb") as handle:
        assert bytes(sbx.files.read("/tmp/e2b/self.py", format="bytes")) == handle.read()


def test_signed_urls(sbx: Sandbox) -> None:
    upload = sbx.upload_url("/tmp/signed.txt", use_signature_expiration=60)
    download = sbx.download_url("/tmp/signed.txt", use_signature_expiration=60)
    # Plain HTTP clients, without any of the SDK's headers: the signature is the credential.
    put = httpx.post(upload, files={"file": ("signed.txt", b"via url")})
    assert put.status_code == 200, put.text
    got = httpx.get(download)
    assert (got.status_code, got.content) == (200, b"via url")
    other = sbx.download_url("/etc/passwd", use_signature_expiration=60)
    assert httpx.get(other.replace("passwd", "shadow")).status_code == 401
    expired = sbx.download_url("/tmp/signed.txt", use_signature_expiration=-10)
    assert httpx.get(expired).status_code == 401


def _count(sandbox: Sandbox) -> int:
    """The background counter's last value (0 before its first write, or mid-write)."""
    try:
        text = sandbox.files.read("/tmp/count")
    except FileNotFoundException:
        return 0
    return int(text) if text.strip() else 0


def test_pause_then_connect_keeps_processes(sbx: Sandbox) -> None:
    sbx.files.write("/tmp/kept.txt", "kept")
    counter = sbx.commands.run(
        "i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done",
        background=True,
        timeout=0,
    )
    attached = sbx.commands.connect(counter.pid)
    # Parked only once it has counted, so the count it had must come back with it.
    before = wait_until(lambda: _count(sbx), what="the counter's first write")
    assert sbx.pause() is True
    # A stream open across the park ends (the process lives on, parked); it does not hang.
    with pytest.raises(SandboxException):
        attached.wait()
    assert Sandbox.get_info(sbx.sandbox_id).state.value == "paused"
    assert not sbx.is_running()
    paused_list = Sandbox.list(query=SandboxQuery(metadata={"suite": "e2b"})).next_items()
    assert sbx.sandbox_id in {s.sandbox_id for s in paused_list}
    with pytest.raises(SandboxException):
        sbx.commands.run("true")
    woken = Sandbox.connect(sbx.sandbox_id)
    assert woken.get_info().state.value == "running"
    assert woken.files.read("/tmp/kept.txt") == "kept"
    assert counter.pid in {p.pid for p in woken.commands.list()}
    first = _count(woken)
    assert first >= before  # not restarted
    wait_until(lambda: _count(woken) > first, what="the counter to go on after the wake")
    assert sbx.beta_pause() is True
    assert sbx.pause() is False  # already paused
    assert Sandbox.connect(sbx.sandbox_id).commands.run("echo back").stdout == "back\n"


def test_fork_and_snapshots(sbx: Sandbox) -> None:
    sbx.files.write("/tmp/origin.txt", "from the parent")
    forks = sbx.fork(count=2, timeout=120)
    try:
        assert len(forks) == 2 and all(isinstance(f, Sandbox) for f in forks)
        for fork in forks:
            assert isinstance(fork, Sandbox)
            assert fork.files.read("/tmp/origin.txt") == "from the parent"
            fork.files.write("/tmp/origin.txt", fork.sandbox_id)
        assert sbx.files.read("/tmp/origin.txt") == "from the parent"
    finally:
        for fork in forks:
            if isinstance(fork, Sandbox):
                fork.kill()
    snapshot = sbx.create_snapshot()
    assert snapshot.snapshot_id in {s.snapshot_id for s in Sandbox.list_snapshots().next_items()}
    restored = Sandbox.create(snapshot.snapshot_id, timeout=120)
    try:
        assert restored.files.read("/tmp/origin.txt") == "from the parent"
    finally:
        restored.kill()
    assert Sandbox.delete_snapshot(snapshot.snapshot_id) is True
    assert Sandbox.delete_snapshot(snapshot.snapshot_id) is False


def test_killed_sandbox_behind_a_session(sbx: Sandbox) -> None:
    terminal = sbx.pty.create(PtySize(rows=24, cols=80), timeout=0)
    handle = sbx.files.watch_dir("/tmp")
    Sandbox.kill(sbx.sandbox_id)
    with pytest.raises(SandboxException):  # ends, does not hang
        terminal.wait()
    with pytest.raises(SandboxException):
        handle.get_new_events()
    with pytest.raises(NotFoundException):
        sbx.get_metrics()
    with pytest.raises(NotFoundException):
        sbx.update_network({"deny_out": ["203.0.113.0/24"]})
    with pytest.raises(SandboxException):
        sbx.commands.run("true", timeout=10)
    with pytest.raises(SandboxException):
        sbx.files.read("/etc/hostname")
    with pytest.raises(NotFoundException):
        Sandbox.connect(sbx.sandbox_id)


def test_bad_input(daemon: Daemon) -> None:
    with pytest.raises(SandboxException, match="404: template 'no-such-template' not found"):
        Sandbox.create("no-such-template")
    with pytest.raises(SandboxException, match=r"400: corral cannot honour network\.egress_proxy"):
        Sandbox.create("base", network={"egress_proxy": {"address": "127.0.0.1:1080"}})
    with pytest.raises(SandboxException, match="400: corral cannot honour mcp"):
        Sandbox.create("base", mcp={"exa": {"apiKey": "x"}})  # type: ignore[typeddict-item]
    with pytest.raises(AuthenticationException):
        Sandbox.create("base", api_key="e2b_" + "0" * 40)
    with pytest.raises(SandboxException, match=r"400: network\.allow_out entry"):
        Sandbox.create("base", network={"allow_out": ["1.1.1.1:99999"]})
    # Fields corral does not know are refused by name, never silently dropped.
    answer = httpx.post(
        f"{daemon.url}/v2/sandboxes",
        headers={"X-API-KEY": daemon.key},
        json={"templateID": "base", "gpu": "h100"},
    )
    assert answer.status_code == 400
    assert "gpu" in answer.json()["message"]
    answer = httpx.post(
        f"{daemon.url}/v2/sandboxes",
        headers={"X-API-KEY": daemon.key},
        json={"templateID": "base", "network": {"allowOut": [], "gpuNet": True}},
    )
    assert answer.status_code == 400 and "'gpuNet'" in answer.json()["message"]
    # envd refuses a request without the sandbox's access token, and ports it cannot forward.
    with daemon.client() as client:
        sandbox_id = client.post("/v1/sandboxes", json={"memory_mib": 256}).json()["id"]
        try:
            health = {"E2b-Sandbox-Id": sandbox_id}
            assert httpx.get(f"{daemon.url}/health", headers=health).status_code == 204
            rpc = httpx.post(
                f"{daemon.url}/process.Process/List",
                headers={**health, "X-Access-Token": "wrong"},
                json={},
            )
            assert rpc.status_code == 401
            # Other ports need the sandbox's traffic (or envd) token, and something listening.
            port = {**health, "E2b-Sandbox-Port": "8080"}
            assert httpx.get(f"{daemon.url}/", headers=port).status_code == 401
            token = {"E2B-Traffic-Access-Token": "0" * 64}
            assert httpx.get(f"{daemon.url}/", headers={**port, **token}).status_code == 401
            bad = httpx.get(f"{daemon.url}/", headers={**health, "E2b-Sandbox-Port": "x"})
            assert bad.status_code == 400
        finally:
            client.delete(f"/v1/sandboxes/{sandbox_id}")


def test_pty_create_input_resize_kill(sbx: Sandbox) -> None:
    output = bytearray()
    terminal = sbx.pty.create(PtySize(rows=24, cols=80), envs={"MARK": "pty-ok"})
    sbx.pty.send_stdin(terminal.pid, b"stty size; echo $MARK; tty\n")
    for _, _, chunk in terminal:  # the shell has answered before the resize
        output.extend(chunk or b"")
        if b"/dev/pts/" in output:
            break
    sbx.pty.resize(terminal.pid, PtySize(rows=40, cols=132))
    sbx.pty.send_stdin(terminal.pid, b"stty size; exit 7\n")
    with pytest.raises(CommandExitException) as ended:
        terminal.wait(on_pty=output.extend)
    assert ended.value.exit_code == 7
    text = output.decode(errors="replace")
    assert "24 80" in text and "40 132" in text and "pty-ok" in text
    assert "/dev/pts/" in text  # a real terminal, not pipes

    sleeper = sbx.pty.create(PtySize(rows=10, cols=20))
    assert sleeper.pid in {p.pid for p in sbx.commands.list()}
    assert sbx.pty.kill(sleeper.pid) is True
    with pytest.raises(CommandExitException):
        sleeper.wait()


def test_watch_dir(sbx: Sandbox) -> None:
    sbx.files.make_dir("/tmp/watched/sub")
    handle = sbx.files.watch_dir("/tmp/watched", recursive=True)
    sbx.files.write("/tmp/watched/a.txt", "one")
    sbx.files.write("/tmp/watched/sub/b.txt", "two")
    sbx.files.rename("/tmp/watched/a.txt", "/tmp/watched/c.txt")
    sbx.commands.run("chmod 600 /tmp/watched/c.txt && rm /tmp/watched/c.txt")
    seen: set[tuple[str, str]] = set()
    wanted = {
        ("a.txt", "create"),
        ("a.txt", "write"),
        ("sub/b.txt", "create"),
        ("a.txt", "rename"),
        ("c.txt", "create"),
        ("c.txt", "chmod"),
        ("c.txt", "remove"),
    }
    deadline = time.monotonic() + 20
    while not wanted <= seen and time.monotonic() < deadline:
        seen |= {(e.name, e.type.value.lower()) for e in handle.get_new_events()}
    handle.stop()
    assert wanted <= seen, seen
    with pytest.raises(SandboxException):
        sbx.files.watch_dir("/tmp/no-such-dir")


async def test_watch_dir_streamed_by_the_async_sdk(_e2b_settings: None) -> None:
    sandbox = await AsyncSandbox.create("base", timeout=120)
    try:
        got: list[tuple[str, str]] = []
        arrived = asyncio.Event()

        def on_event(event: FilesystemEvent) -> None:
            got.append((event.name, event.type.value.lower()))
            if ("new.txt", "write") in got:
                arrived.set()

        await sandbox.files.make_dir("/tmp/w")
        handle = await sandbox.files.watch_dir("/tmp/w", on_event, timeout=60)
        await sandbox.files.write("/tmp/w/new.txt", "x")
        await asyncio.wait_for(arrived.wait(), 20)
        await handle.stop()
        assert ("new.txt", "create") in got
    finally:
        await sandbox.kill()


def test_metrics(sbx: Sandbox) -> None:
    sbx.commands.run("head -c 20000000 /dev/urandom | sha256sum")
    (sample,) = sbx.get_metrics()
    assert sample.cpu_count == 1 and sample.mem_total == 512 * 1024 * 1024
    assert sample.mem_used > 0 and 0 <= sample.cpu_used_pct <= 100
    assert sample.disk_total == 2048 * 1024 * 1024
    assert abs(sample.timestamp.timestamp() - time.time()) < 60
    assert Sandbox.get_metrics(sbx.sandbox_id)[0].mem_total == sample.mem_total
    sbx.pause()
    assert Sandbox.get_metrics(sbx.sandbox_id) == []


def test_network_options_become_egress_rules(daemon: Daemon) -> None:
    sandbox = Sandbox.create(
        "base",
        timeout=120,
        network={"allow_out": ["1.1.1.1", "api.example.com"], "deny_out": [ALL_TRAFFIC]},
    )
    try:
        with daemon.client() as client:
            policy = client.get(f"/v1/sandboxes/{sandbox.sandbox_id}").json()["network"]
        assert policy == {"mode": "project", "allow": ["1.1.1.1", "api.example.com"], "deny": []}
        info = sandbox.get_info()
        assert info.allow_internet_access is False
        assert info.network is not None
        assert info.network["allow_out"] == ["1.1.1.1", "api.example.com"]
        sandbox.update_network({"allow_out": ["9.9.9.9"], "deny_out": ["203.0.113.0/24"]})
        with daemon.client() as client:
            policy = client.get(f"/v1/sandboxes/{sandbox.sandbox_id}").json()["network"]
        assert policy == {
            "mode": "project_internet",
            "allow": ["9.9.9.9"],
            "deny": ["203.0.113.0/24"],
        }
        assert sandbox.get_info().allow_internet_access is True
        sandbox.update_network({"allow_internet_access": False})
        with daemon.client() as client:
            assert client.get(f"/v1/sandboxes/{sandbox.sandbox_id}").json()["network"] == {
                "mode": "project",
                "allow": [],
                "deny": [],
            }
    finally:
        sandbox.kill()
    offline = Sandbox.create("base", timeout=60, allow_internet_access=False)
    try:
        with daemon.client() as client:
            record = client.get(f"/v1/sandboxes/{offline.sandbox_id}").json()
        assert record["network"]["mode"] == "project"
        with pytest.raises(SandboxException, match="in E2B the allow wins"):
            offline.update_network({"allow_out": ["8.8.8.8"], "deny_out": ["8.8.0.0/16"]})
    finally:
        offline.kill()


def test_domain_traffic_token_and_other_ports(daemon: Daemon, sbx: Sandbox) -> None:
    port = daemon.url.rpartition(":")[2]
    assert sbx.sandbox_domain == f"localhost:{port}"  # the daemon's domain of port host names
    assert sbx.get_host(8000) == f"8000-{sbx.sandbox_id}.localhost:{port}"
    traffic = sbx.traffic_access_token or ""
    assert re.fullmatch(r"[0-9a-f]{64}", traffic)
    envd_token = Sandbox.connect(sbx.sandbox_id)._envd_access_token
    assert envd_token and traffic != envd_token
    # A server on port 8000 of the sandbox, reached as the E2B SDKs address ports.
    sbx.files.write("/tmp/site/hello.txt", "served from the sandbox")
    sbx.commands.run("cd /tmp/site && exec python3 -m http.server 8000", background=True)
    routed = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8000"}
    closed = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8001"}
    for credential in ({"E2B-Traffic-Access-Token": traffic}, {"X-Access-Token": envd_token}):
        deadline = time.monotonic() + 20
        while True:
            got = httpx.get(f"{daemon.url}/hello.txt?x=1", headers={**routed, **credential})
            if got.status_code == 200 or time.monotonic() > deadline:
                break
        assert (got.status_code, got.text) == (200, "served from the sandbox")
    refused = httpx.get(f"{daemon.url}/", headers={**closed, "X-Access-Token": envd_token})
    assert refused.status_code == 502 and "8001" in refused.json()["message"]


def test_first_generation_routes_and_host_names(daemon: Daemon, sbx: Sandbox) -> None:
    key = {"X-API-KEY": daemon.key}
    listed = httpx.get(f"{daemon.url}/sandboxes", headers=key).json()
    assert sbx.sandbox_id in {s["sandboxID"] for s in listed}
    detail = httpx.get(f"{daemon.url}/sandboxes/{sbx.sandbox_id}", headers=key).json()
    token = detail["envdAccessToken"]
    # envd addressed by host name, as behind a wildcard DNS name: {port}-{id}.{domain}
    host = {"Host": f"49983-{sbx.sandbox_id}.corral.test", "X-Access-Token": token}
    sleeper = sbx.commands.run("sleep 60", background=True)
    listed_procs = httpx.post(f"{daemon.url}/process.Process/List", headers=host, json={})
    assert listed_procs.status_code == 200, listed_procs.text
    assert sleeper.pid in {p["pid"] for p in listed_procs.json()["processes"]}
    stat = httpx.post(
        f"{daemon.url}/filesystem.Filesystem/Stat", headers=host, json={"path": "/etc"}
    )
    assert stat.status_code == 200
    assert stat.json()["entry"]["type"] == "FILE_TYPE_DIRECTORY"


async def test_async_sdk(_e2b_settings: None) -> None:
    sandbox = await AsyncSandbox.create("base", timeout=300, metadata={"suite": "e2b-async"})
    try:
        out: list[str] = []
        result = await sandbox.commands.run("echo async; echo e >&2", on_stdout=out.append)
        assert (result.stdout, result.stderr, "".join(out)) == ("async\n", "e\n", "async\n")
        handle = await sandbox.commands.run("cat", background=True, stdin=True)
        await sandbox.commands.send_stdin(handle.pid, "in\n")
        await sandbox.commands.close_stdin(handle.pid)
        assert (await handle.wait()).stdout == "in\n"
        await sandbox.files.write("/tmp/async.txt", "a")
        assert await sandbox.files.read("/tmp/async.txt") == "a"
        assert [e.name for e in await sandbox.files.list("/tmp") if e.name == "async.txt"]
        assert await sandbox.files.exists("/tmp/async.txt")
        await sandbox.files.rename("/tmp/async.txt", "/tmp/async2.txt")
        await sandbox.files.remove("/tmp/async2.txt")
        assert not await sandbox.files.exists("/tmp/async2.txt")
        assert (await sandbox.get_info()).metadata == {"suite": "e2b-async"}
        written = await sandbox.files.write_files(
            [{"path": "/tmp/am/1.txt", "data": "1"}, {"path": "/tmp/am/2.txt", "data": b"2"}]
        )
        assert [w.path for w in written] == ["/tmp/am/1.txt", "/tmp/am/2.txt"]
        assert (await sandbox.files.get_info("/tmp/am/2.txt")).size == 1
        assert await sandbox.files.make_dir("/tmp/am/d") is True
        assert await sandbox.files.make_dir("/tmp/am/d") is False
        sleeper = await sandbox.commands.run(
            "echo up; touch /tmp/am/up; sleep 300", background=True
        )
        deadline = time.monotonic() + 10
        while not await sandbox.files.exists("/tmp/am/up") and time.monotonic() < deadline:
            pass
        assert sleeper.pid in {p.pid for p in await sandbox.commands.list()}
        attached = await sandbox.commands.connect(sleeper.pid)
        assert await sandbox.commands.kill(sleeper.pid) is True
        with pytest.raises(CommandExitException) as killed:
            await attached.wait()
        assert "up\n" in killed.value.stdout
        (fork,) = await sandbox.fork(count=1, timeout=60)
        assert isinstance(fork, AsyncSandbox)
        try:
            assert await fork.files.read("/tmp/am/1.txt") == "1"
        finally:
            await fork.kill()
        await sandbox.set_timeout(200)
        assert await sandbox.pause() is True
        woken = await AsyncSandbox.connect(sandbox.sandbox_id)
        assert (await woken.commands.run("echo woke")).stdout == "woke\n"
        listed = await AsyncSandbox.list(
            query=SandboxQuery(metadata={"suite": "e2b-async"})
        ).next_items()
        assert [s.sandbox_id for s in listed] == [sandbox.sandbox_id]
    finally:
        await AsyncSandbox.kill(sandbox.sandbox_id)
    with pytest.raises(SandboxException):
        await sandbox.commands.run("true", timeout=10)
