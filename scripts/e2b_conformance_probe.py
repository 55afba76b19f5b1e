"""One row per E2B SDK call, run against corral by an unchanged official SDK.

Run by ``scripts/e2b-conformance`` inside a virtual environment holding one release of ``e2b``
(and maybe ``e2b-code-interpreter``), with the settings ``corral e2b env`` prints in the
environment. Imports nothing of corral. Prints one JSON object: the SDK versions and, per call,
``{"status": "works" | "fails" | "not in SDK", "detail": ...}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import e2b
from e2b import AsyncSandbox, Sandbox

ALL_TRAFFIC = "0.0.0.0/0"
CHECKS: list[tuple[str, Callable[[Sandbox], None]]] = []


class NotInSdk(Exception):
    """This SDK release has no such call."""


class NotRun(Exception):
    """The check needs a package this environment does not hold."""


def check(name: str) -> Callable[[Callable[[Sandbox], None]], Callable[[Sandbox], None]]:
    def register(fn: Callable[[Sandbox], None]) -> Callable[[Sandbox], None]:
        CHECKS.append((name, fn))
        return fn

    return register


def need(owner: Any, *names: str) -> None:
    for name in names:
        if not hasattr(owner, name):
            raise NotInSdk(name)


def wait_for(condition: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


@check("Sandbox.create(template, timeout, metadata, envs)")
def create(sbx: Sandbox) -> None:
    other = Sandbox.create("base", timeout=60, metadata={"probe": "create"}, envs={"V": "1"})
    try:
        assert other.commands.run("echo $V").stdout == "1\n"
        assert other.get_info().metadata == {"probe": "create"}
    finally:
        other.kill()


@check("Sandbox.create(allow_internet_access=False)")
def no_internet(sbx: Sandbox) -> None:
    other = Sandbox.create("base", timeout=60, allow_internet_access=False)
    try:
        info = other.get_info()
        if hasattr(info, "allow_internet_access"):
            assert info.allow_internet_access is False
    finally:
        other.kill()


@check("Sandbox.create(network={allow_out, deny_out})")
def network_rules(sbx: Sandbox) -> None:
    network = {"allow_out": ["1.1.1.1"], "deny_out": [ALL_TRAFFIC]}
    other = Sandbox.create("base", timeout=60, network=network)  # type: ignore[arg-type]
    try:
        info = other.get_info()
        if getattr(info, "network", None) is not None:
            assert info.network["allow_out"] == ["1.1.1.1"], info.network  # type: ignore[index]
    finally:
        other.kill()


@check("sbx.update_network(...)")
def update_network(sbx: Sandbox) -> None:
    need(sbx, "update_network")
    sbx.update_network({"deny_out": ["203.0.113.0/24"]})  # type: ignore[typeddict-unknown-key]
    sbx.update_network({})  # type: ignore[typeddict-item]


@check("Sandbox.connect(id)")
def connect(sbx: Sandbox) -> None:
    again = Sandbox.connect(sbx.sandbox_id)
    assert again.commands.run("echo same").stdout == "same\n"


@check("Sandbox.list(query, limit)")
def listing(sbx: Sandbox) -> None:
    from e2b import SandboxQuery

    found = Sandbox.list(query=SandboxQuery(metadata={"probe": "main"}), limit=10)
    items = found.next_items() if hasattr(found, "next_items") else found
    assert sbx.sandbox_id in {s.sandbox_id for s in items}  # type: ignore[union-attr]


@check("sbx.get_info(), sbx.is_running()")
def info(sbx: Sandbox) -> None:
    got = sbx.get_info()
    assert got.sandbox_id == sbx.sandbox_id and got.metadata == {"probe": "main"}
    assert sbx.is_running()


@check("sbx.set_timeout(s)")
def set_timeout(sbx: Sandbox) -> None:
    sbx.set_timeout(600)
    got = sbx.get_info()
    assert (got.end_at - got.started_at).total_seconds() > 590


@check("Sandbox.kill(id), sbx.kill()")
def kill(sbx: Sandbox) -> None:
    other = Sandbox.create("base", timeout=60)
    assert Sandbox.kill(other.sandbox_id) is True
    assert Sandbox.kill(other.sandbox_id) is False
    assert not other.is_running()


@check("commands.run(cwd, envs, user, on_stdout, on_stderr)")
def run_foreground(sbx: Sandbox) -> None:
    out: list[str] = []
    err: list[str] = []
    result = sbx.commands.run(
        "echo $A; pwd; id -un; echo e >&2",
        envs={"A": "a"},
        cwd="/usr",
        user="nobody",
        on_stdout=out.append,
        on_stderr=err.append,
    )
    assert result.stdout.splitlines() == ["a", "/usr", "nobody"], result.stdout
    assert "".join(out) == result.stdout and "".join(err) == "e\n"


@check("commands.run(timeout) ends the command")
def run_timeout(sbx: Sandbox) -> None:
    from e2b import TimeoutException

    try:
        sbx.commands.run("sleep 30", timeout=1)
    except TimeoutException:
        return
    raise AssertionError("no TimeoutException")


@check("commands.run(background=True), handle.wait()")
def run_background(sbx: Sandbox) -> None:
    handle = sbx.commands.run("echo bg", background=True)
    assert handle.wait().stdout == "bg\n"


@check("commands.run(stdin=True), send_stdin, close_stdin")
def run_stdin(sbx: Sandbox) -> None:
    need(sbx.commands, "close_stdin")
    handle = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(handle.pid, "in\n")
    sbx.commands.close_stdin(handle.pid)
    assert handle.wait().stdout == "in\n"


@check("commands.list/connect/kill")
def commands_manage(sbx: Sandbox) -> None:
    handle = sbx.commands.run("echo up; touch /tmp/probe-up; sleep 300", background=True)
    wait_for(lambda: sbx.files.exists("/tmp/probe-up"))
    assert handle.pid in {p.pid for p in sbx.commands.list()}
    attached = sbx.commands.connect(handle.pid)
    assert sbx.commands.kill(handle.pid) is True
    try:
        attached.wait()
    except Exception as exc:  # CommandExitException: killed
        assert "up" in str(getattr(exc, "stdout", "up"))
    assert handle.pid not in {p.pid for p in sbx.commands.list()}


@check("pty.create/send_stdin/resize/kill")
def pty(sbx: Sandbox) -> None:
    from e2b import PtySize

    output = bytearray()
    terminal = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.send_stdin(terminal.pid, b"stty size\n")
    for _, _, chunk in terminal:
        output.extend(chunk or b"")
        if b"24 80" in output:
            break
    sbx.pty.resize(terminal.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(terminal.pid, b"stty size; exit 3\n")
    try:
        terminal.wait(on_pty=output.extend)
    except Exception as exc:
        assert getattr(exc, "exit_code", None) == 3, exc
    assert b"30 100" in output, bytes(output)
    other = sbx.pty.create(PtySize(rows=5, cols=5))
    assert sbx.pty.kill(other.pid) is True


@check("files.write/read (text, bytes, stream)")
def files_rw(sbx: Sandbox) -> None:
    sbx.files.write("/tmp/probe/a.txt", "hello")
    assert sbx.files.read("/tmp/probe/a.txt") == "hello"
    blob = bytes(range(256)) * 1000
    sbx.files.write("/tmp/probe/b.bin", blob)
    assert bytes(sbx.files.read("/tmp/probe/b.bin", format="bytes")) == blob
    streamed = b"".join(sbx.files.read("/tmp/probe/b.bin", format="stream"))
    assert streamed == blob


@check("files.write_files")
def files_many(sbx: Sandbox) -> None:
    need(sbx.files, "write_files")
    written = sbx.files.write_files(
        [{"path": "/tmp/probe/m1", "data": "1"}, {"path": "/tmp/probe/m2", "data": b"2"}]
    )
    assert [w.path for w in written] == ["/tmp/probe/m1", "/tmp/probe/m2"]


@check("files.list/exists/get_info")
def files_look(sbx: Sandbox) -> None:
    sbx.files.write("/tmp/probe/look/x.txt", "xyz")
    assert [e.name for e in sbx.files.list("/tmp/probe/look")] == ["x.txt"]
    assert sbx.files.exists("/tmp/probe/look/x.txt")
    assert not sbx.files.exists("/tmp/probe/look/nope")
    need(sbx.files, "get_info")
    assert sbx.files.get_info("/tmp/probe/look/x.txt").size == 3


@check("files.rename/remove/make_dir")
def files_change(sbx: Sandbox) -> None:
    assert sbx.files.make_dir("/tmp/probe/d/e") is True
    sbx.files.write("/tmp/probe/d/f.txt", "f")
    assert sbx.files.rename("/tmp/probe/d/f.txt", "/tmp/probe/d/g.txt").path == "/tmp/probe/d/g.txt"
    sbx.files.remove("/tmp/probe/d")
    assert not sbx.files.exists("/tmp/probe/d")


@check("files.watch_dir")
def watch(sbx: Sandbox) -> None:
    sbx.files.make_dir("/tmp/probe/w")
    handle = sbx.files.watch_dir("/tmp/probe/w")
    try:
        sbx.files.write("/tmp/probe/w/new.txt", "n")
        seen: list[Any] = []
        wait_for(lambda: bool(seen.extend(handle.get_new_events()) or seen), 20)
        assert any(e.name == "new.txt" for e in seen), seen
    finally:
        handle.stop()


@check("upload_url/download_url (signed)")
def signed_urls(sbx: Sandbox) -> None:
    import httpx

    need(sbx, "upload_url", "download_url")
    up = sbx.upload_url("/tmp/probe/u.txt", use_signature_expiration=60)
    assert httpx.post(up, files={"file": ("u.txt", b"via url")}).status_code == 200
    down = sbx.download_url("/tmp/probe/u.txt", use_signature_expiration=60)
    assert httpx.get(down).content == b"via url"


@check("sbx.get_metrics()")
def metrics(sbx: Sandbox) -> None:
    need(sbx, "get_metrics")
    (sample,) = sbx.get_metrics()
    assert sample.mem_total > 0 and sample.mem_used > 0


@check("sbx.fork(count)")
def fork(sbx: Sandbox) -> None:
    need(sbx, "fork")
    sbx.files.write("/tmp/probe/origin", "parent")
    forks = sbx.fork(count=1, timeout=60)  # type: ignore[call-arg]
    try:
        assert forks[0].files.read("/tmp/probe/origin") == "parent"
    finally:
        for f in forks:
            f.kill()


@check("create_snapshot, list_snapshots, Sandbox.create(snapshot), delete_snapshot")
def snapshots(sbx: Sandbox) -> None:
    need(sbx, "create_snapshot")
    sbx.files.write("/tmp/probe/snap", "kept")
    snap = sbx.create_snapshot()
    restored = Sandbox.create(snap.snapshot_id, timeout=60)
    try:
        assert restored.files.read("/tmp/probe/snap") == "kept"
    finally:
        restored.kill()
    assert snap.snapshot_id in {s.snapshot_id for s in Sandbox.list_snapshots().next_items()}
    assert Sandbox.delete_snapshot(snap.snapshot_id) is True


@check("sbx.pause(), Sandbox.connect (resume)")
def pause(sbx: Sandbox) -> None:
    pause_call = getattr(sbx, "pause", None) or getattr(sbx, "beta_pause", None)
    if pause_call is None:
        raise NotInSdk("pause")
    sbx.files.write("/tmp/probe/paused", "still here")
    pause_call()
    assert sbx.get_info().state.value == "paused"
    woken = Sandbox.connect(sbx.sandbox_id)
    assert woken.files.read("/tmp/probe/paused") == "still here"


@check("AsyncSandbox: create, commands.run, files, kill")
def async_sdk(sbx: Sandbox) -> None:
    async def run() -> None:
        other = await AsyncSandbox.create("base", timeout=60)
        try:
            assert (await other.commands.run("echo a")).stdout == "a\n"
            await other.files.write("/tmp/a", "b")
            assert await other.files.read("/tmp/a") == "b"
        finally:
            await other.kill()

    asyncio.run(run())


@check("code interpreter: run_code state, results, errors")
def run_code(sbx: Sandbox) -> None:
    try:
        from e2b_code_interpreter import Sandbox as CodeSandbox
    except ImportError:
        raise NotRun("e2b-code-interpreter not installed (--code-interpreter)") from None
    code = CodeSandbox.create("code-interpreter", timeout=120)
    try:
        code.run_code("x = 41")
        assert code.run_code("x + 1").text == "42"
        failed = code.run_code("1 / 0")
        assert failed.error is not None and failed.error.name == "ZeroDivisionError"
    finally:
        code.kill()


def main() -> None:
    versions = {"e2b": importlib.metadata.version("e2b")}
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        versions["e2b-code-interpreter"] = importlib.metadata.version("e2b-code-interpreter")
    results: dict[str, dict[str, str]] = {}
    sbx = Sandbox.create("base", timeout=600, metadata={"probe": "main"})
    try:
        for name, fn in CHECKS:
            started = time.monotonic()
            try:
                fn(sbx)
                results[name] = {"status": "works"}
            except NotInSdk as exc:
                results[name] = {"status": "not in SDK", "detail": str(exc)}
            except NotRun as exc:
                results[name] = {"status": "not run", "detail": str(exc)}
            except Exception as exc:
                detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                results[name] = {"status": "fails", "detail": detail}
                print(traceback.format_exc(), file=sys.stderr)
            results[name]["seconds"] = f"{time.monotonic() - started:.2f}"
    finally:
        Sandbox.kill(sbx.sandbox_id)
    print(json.dumps({"versions": versions, "sdk": e2b.__name__, "results": results}))


if __name__ == "__main__":
    main()
