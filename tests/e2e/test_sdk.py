"""The Python SDK against a real daemon."""

from __future__ import annotations

import hashlib
import os

import pytest

from corral import AsyncSandbox, Sandbox
from corral.sdk.errors import CapacityError, Conflict, InvalidRequest, NotFound
from tests.e2e.conftest import Daemon


@pytest.fixture
def sbx(daemon: Daemon) -> Sandbox:
    with Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=384) as sandbox:
        yield sandbox


def test_exec_and_streaming_callbacks(sbx: Sandbox) -> None:
    result = sbx.exec("python3 -c 'print(6*7)'")
    assert (result.exit_code, result.stdout) == (0, "42\n")
    seen: list[str] = []
    result = sbx.exec(
        ["sh", "-c", "for i in 1 2 3; do echo line$i; done; echo err >&2"],
        on_stdout=seen.append,
    )
    assert "".join(seen) == "line1\nline2\nline3\n"
    assert result.stderr == "err\n"


def test_stdin_env_cwd_user(sbx: Sandbox) -> None:
    result = sbx.exec(["cat"], stdin=b"piped in")
    assert result.stdout == "piped in"
    result = sbx.exec("echo $A-$B; pwd; id -u", env={"A": "1", "B": "2"}, cwd="/usr", user="nobody")
    assert result.stdout.splitlines() == ["1-2", "/usr", "65534"]


def test_huge_and_binary_output(sbx: Sandbox) -> None:
    result = sbx.exec("head -c 30000000 /dev/zero | tr '\\0' a")
    assert result.exit_code == 0
    assert len(result.stdout_bytes) == 30_000_000
    result = sbx.exec("printf '\\377\\000\\001'")
    assert result.stdout_bytes == b"\xff\x00\x01"


def test_background_process_and_reconnect(sbx: Sandbox) -> None:
    proc = sbx.exec_background("for i in 1 2 3; do echo tick$i; sleep 0.2; done")
    assert any(p.pid == proc.pid for p in sbx.processes())
    done = proc.wait()
    assert done.exit_code == 0
    assert done.stdout == "tick1\ntick2\ntick3\n"


def test_files_roundtrip_and_large_stream(sbx: Sandbox, tmp_path) -> None:  # type: ignore[no-untyped-def]
    sbx.files.write("/work/a/b.txt", "hello")
    assert sbx.files.read("/work/a/b.txt") == b"hello"
    names = [e.name for e in sbx.files.list("/work/a")]
    assert names == ["b.txt"]
    sbx.files.move("/work/a/b.txt", "/work/c.txt")
    assert sbx.files.stat("/work/c.txt").size == 5
    sbx.files.remove("/work/c.txt")
    assert not sbx.files.exists("/work/c.txt")

    big = tmp_path / "big.bin"
    with open(big, "wb") as handle:
        for _ in range(64):
            handle.write(os.urandom(1 << 20))
    sbx.files.upload(big, "/tmp/big.bin")
    out = sbx.exec("sha256sum /tmp/big.bin")
    assert out.stdout.split()[0] == hashlib.sha256(big.read_bytes()).hexdigest()
    back = tmp_path / "back.bin"
    sbx.files.download("/tmp/big.bin", back)
    assert back.read_bytes() == big.read_bytes()


def test_bad_paths_and_names(sbx: Sandbox) -> None:
    with pytest.raises(NotFound):
        sbx.files.read("/no/such/file")
    # '..' resolves inside the sandbox: it cannot reach the host.
    sbx.files.write("/tmp/x/../y.txt", "inside")
    assert sbx.files.read("/tmp/y.txt") == b"inside"
    assert sbx.files.read("/../../../etc/hostname") == sbx.files.read("/etc/hostname")
    odd = "/tmp/caf\udce9.txt"  # a name that is not UTF-8 (latin-1 é)
    sbx.files.write(odd, b"latin")
    assert sbx.files.read(odd) == b"latin"
    out = sbx.exec(["ls", "/tmp"])
    assert b"caf\xe9.txt" in out.stdout_bytes


def test_errors(daemon: Daemon) -> None:
    with pytest.raises(NotFound):
        Sandbox.connect("sb-doesnotexist", url=daemon.url, api_key=daemon.key).exec("true")
    with pytest.raises(InvalidRequest):
        Sandbox.create(url=daemon.url, api_key=daemon.key, cpu=-1)
    with pytest.raises(InvalidRequest, match="memory"):
        Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=10**8)
    # The daemon is shared: take what is free now (other tests' sandboxes may hold some), at
    # most the 8192 MiB ceiling, which leaves less than 8192 MiB of the 12288 free.
    with daemon.client() as client:
        free = int(client.get("/v1/capacity").json()["memory"]["free"])
    big = Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=min(8192, free - 256))
    try:
        with pytest.raises(CapacityError, match="not enough free memory"):
            Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=8192)
    finally:
        big.kill()
    sbx = Sandbox.create(url=daemon.url, api_key=daemon.key)
    sbx.kill()
    with pytest.raises(Conflict):
        sbx.exec("true")


async def test_async_sandbox(daemon: Daemon) -> None:
    async with await AsyncSandbox.create(url=daemon.url, api_key=daemon.key) as sbx:
        result = await sbx.exec("echo async")
        assert result.stdout == "async\n"
        await sbx.files.write("/tmp/f", b"x")
        assert await sbx.files.read("/tmp/f") == b"x"
