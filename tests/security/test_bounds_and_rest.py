"""The host boundary, attacked: state at rest, unbounded inputs, the sandbox's spec and the docs.

One real daemon (tests/e2e/conftest.py's harness) on a data dir whose parent any user may
traverse, so an unprivileged reader is stopped by the daemon's own modes and nothing else. It is
started once, stopped, its files loosened the way an older version left them, and started again:
every test then runs against the corrected state. Its bounds are set small (an 8 MiB import,
a 256 KiB console) so that crossing them is quick.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from corral.images.store import base_recipe
from tests.e2e.conftest import IMAGES_DIR, Daemon, clear_leftovers, start_daemon, stop_daemon

pytestmark = pytest.mark.e2e

MiB = 1024 * 1024
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
CONSOLE_KIB = 256
IMPORT_MIB = 8
ENV = {"CORRAL_MAX_IMPORT_MIB": str(IMPORT_MIB), "CORRAL_CONSOLE_LOG_KIB": str(CONSOLE_KIB)}


def exec_run(client: httpx.Client, sbx: str, body: dict) -> tuple[int | None, str, str]:
    with client.stream("POST", f"/v1/sandboxes/{sbx}/exec", json=body) as response:
        assert response.status_code == 200, response.read()
        events = [json.loads(line) for line in response.iter_lines() if line]
    out = {"stdout": b"", "stderr": b""}
    for event in events:
        if event["type"] in out:
            out[event["type"]] += base64.b64decode(event["data"])
    return events[-1].get("exit_code"), out["stdout"].decode(), out["stderr"].decode()


def loosen(path: Path) -> None:
    """What an older daemon (umask 022) left: ``chmod -R go+rX``, dirs 0755 and files 0644."""
    for dirpath, dirnames, filenames in os.walk(path):
        os.chmod(dirpath, os.stat(dirpath).st_mode | 0o055)
        for name in filenames:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full) and os.path.isfile(full):
                os.chmod(full, os.stat(full).st_mode | 0o044)
        dirnames[:] = [d for d in dirnames if not os.path.ismount(os.path.join(dirpath, d))]


@pytest.fixture(scope="module")
def state() -> Iterator[dict[str, object]]:
    if not (IMAGES_DIR / "base" / "image.json").exists():
        raise RuntimeError(f"the base image is missing from {IMAGES_DIR}: run ./scripts/setup")
    parent = Path(tempfile.mkdtemp(prefix="corral-rest-", dir="/tmp"))
    os.chmod(parent, 0o755)  # anyone may look in: only the daemon's modes keep them out
    data_dir = parent / "data"
    prefix = "cs" + secrets.token_hex(2)
    made: dict[str, object] = {"parent": parent}
    daemon: Daemon | None = None
    try:
        daemon = start_daemon(data_dir, prefix, extra_env=ENV)
        with daemon.client() as client:
            created = client.post("/v1/sandboxes", json={"memory_mib": 128})
            assert created.status_code == 201, created.text + daemon.log()[-3000:]
            sbx = created.json()["id"]
            assert exec_run(client, sbx, {"shell": "echo kept > /kept"})[0] == 0
            snap = client.post(f"/v1/sandboxes/{sbx}/snapshots", json={"name": "keep"})
            assert snap.status_code == 201, snap.text
            parked = client.post(f"/v1/sandboxes/{sbx}/park")
            assert parked.status_code == 200, parked.text
        stop_daemon(daemon, kill_sandboxes=False)
        loosen(data_dir)
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o755
        assert stat.S_IMODE((data_dir / "admin.key").stat().st_mode) == 0o644
        daemon = None
        daemon = start_daemon(data_dir, prefix, extra_env=ENV)
        made.update(daemon=daemon, parked=sbx)
        yield made
    finally:
        if daemon is not None:
            stop_daemon(daemon)
        left = clear_leftovers(prefix)
        shutil.rmtree(parent, ignore_errors=True)
        assert not left, f"namespaces left behind: {left}"


@pytest.fixture
def daemon(state: dict[str, object]) -> Daemon:
    found = state["daemon"]
    assert isinstance(found, Daemon)
    return found


@pytest.fixture
def sandbox(daemon: Daemon) -> Iterator[str]:
    with daemon.client() as client:
        created = client.post("/v1/sandboxes", json={"memory_mib": 256, "disk_mib": 64})
        assert created.status_code == 201, created.text
        sbx = created.json()["id"]
        try:
            yield sbx
        finally:
            client.delete(f"/v1/sandboxes/{sbx}")


def healthy(daemon: Daemon) -> bool:
    return httpx.get(daemon.url + "/healthz", timeout=10).status_code == 200


# -- state at rest ---------------------------------------------------------------------------


def test_an_unprivileged_user_can_read_nothing_of_the_state(
    daemon: Daemon, state: dict[str, object]
) -> None:
    data = daemon.data_dir
    parked = data / "parked" / str(state["parked"])
    image_file = next(p for p in parked.rglob("*") if p.is_file())
    attempts = [
        ["ls", str(data)],
        ["cat", str(data / "admin.key")],
        ["cat", str(data / "corral.db")],
        ["ls", str(data / "store")],
        ["ls", str(parked)],
        ["cat", str(image_file)],
        ["ls", str(data / "snapshots" / "keep")],
        ["ls", str(data / "sandboxes")],
    ]
    for argv in attempts:
        out = subprocess.run([*NOBODY, *argv], capture_output=True, text=True, timeout=10)
        assert out.returncode != 0, f"uid 65534 could run {argv}: {out.stdout[:200]}"
        assert "Permission denied" in out.stderr, out.stderr
        assert daemon.key not in out.stdout


def test_modes_left_open_by_an_older_daemon_are_corrected_at_start(
    daemon: Daemon, state: dict[str, object]
) -> None:
    data = daemon.data_dir
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    for name in ("corral.db", "admin.key"):
        assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
    for name in ("store", "parked", "snapshots", "sandboxes", "agent"):
        assert stat.S_IMODE((data / name).stat().st_mode) == 0o700, name
    for tree in (data / "parked" / str(state["parked"]), data / "snapshots" / "keep"):
        for path in [tree, *tree.rglob("*")]:
            mode = stat.S_IMODE(path.lstat().st_mode)
            if path.is_symlink():
                continue
            assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
    # Nothing stored was lost by the restart: the parked sandbox wakes with its file.
    with daemon.client() as client:
        sbx = str(state["parked"])
        woke = client.post(f"/v1/sandboxes/{sbx}/wake")
        assert woke.status_code == 200, woke.text
        assert exec_run(client, sbx, {"cmd": ["cat", "/kept"]})[1] == "kept\n"
        assert client.get("/v1/snapshots/keep").status_code == 200


def test_new_state_is_born_private_under_the_daemons_umask(daemon: Daemon) -> None:
    status = Path(f"/proc/{daemon.process.pid}/status").read_text()
    umask = next(line.split()[1] for line in status.splitlines() if line.startswith("Umask:"))
    assert int(umask, 8) == 0o077
    for path in (daemon.data_dir / "corral.db-wal", daemon.data_dir / "corral.db-shm"):
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_the_host_wide_images_dir_is_made_private(tmp_path: Path) -> None:
    images = tmp_path / "images"
    (images / "base" / "rootfs").mkdir(parents=True)
    # An image of the current recipe, so build-base keeps it rather than rebuilding it.
    (images / "base" / "image.json").write_text(json.dumps({"recipe": base_recipe()}))
    os.chmod(images, 0o755)
    out = subprocess.run(
        [sys.executable, "-m", "corral.images", "build-base", "--images-dir", str(images)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "already built" in out.stdout
    assert stat.S_IMODE(images.stat().st_mode) == 0o700


# -- unbounded inputs ------------------------------------------------------------------------


def test_an_oversized_json_body_is_refused_with_413(daemon: Daemon) -> None:
    with daemon.client() as client:
        before = client.get("/v1/sandboxes").json()["sandboxes"]
        huge = {"memory_mib": 128, "metadata": {"k": "v" * (2 * MiB)}}
        response = client.post("/v1/sandboxes", json=huge)
        assert response.status_code == 413
        body = response.json()
        assert body["code"] == "too_large" and "1 MiB" in body["message"], body

        def chunked() -> Iterator[bytes]:  # no Content-Length: cut off as it arrives
            yield b'{"metadata": {"k": "'
            for _ in range(4):
                yield b"v" * MiB
            yield b'"}}'

        response = client.post(
            "/v1/sandboxes", content=chunked(), headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 413 and response.json()["code"] == "too_large"
        assert client.get("/v1/sandboxes").json()["sandboxes"] == before
    assert healthy(daemon)


def test_an_oversized_stdin_write_is_refused_and_the_process_lives_on(
    daemon: Daemon, sandbox: str
) -> None:
    with daemon.client() as client:
        started = client.post(
            f"/v1/sandboxes/{sandbox}/exec",
            json={"cmd": ["cat"], "stdin": True, "background": True},
        )
        pid = started.json()["pid"]
        url = f"/v1/sandboxes/{sandbox}/processes/{pid}"
        response = client.post(url + "/stdin", content=b"x" * (2 * MiB))
        assert response.status_code == 413
        assert "stdin" in response.json()["message"] and "1 MiB" in response.json()["message"]
        assert client.post(url + "/stdin", content=b"small\n").status_code == 204
        assert client.post(url + "/close-stdin").status_code == 204
        lines = []
        with client.stream("GET", url + "/events") as events:
            for line in events.iter_lines():
                if line:
                    lines.append(json.loads(line))
        out = b"".join(base64.b64decode(e["data"]) for e in lines if e["type"] == "stdout")
        assert out == b"small\n" and lines[-1]["exit_code"] == 0


def test_an_import_over_the_cap_is_refused_and_leaves_nothing(daemon: Daemon) -> None:
    work = daemon.data_dir / "work"
    with daemon.client() as client:
        before = client.get("/v1/snapshots").json()
        response = client.post("/v1/import", content=b"\0" * ((IMPORT_MIB + 1) * MiB))
        assert response.status_code == 413
        assert f"{IMPORT_MIB} MiB" in response.json()["message"]

        def stream() -> Iterator[bytes]:
            for _ in range(IMPORT_MIB + 2):
                yield b"\0" * MiB

        try:
            streamed = client.post("/v1/import", content=stream())
        except httpx.HTTPError:
            pass  # the daemon may close the connection while the client still sends
        else:
            assert streamed.status_code == 413, streamed.text
        assert client.get("/v1/snapshots").json() == before
    assert not [p for p in work.iterdir() if p.name.startswith("import-")]
    assert healthy(daemon)


def test_a_file_write_over_the_disk_is_refused_early_or_cut_off(
    daemon: Daemon, sandbox: str
) -> None:
    url = f"/v1/sandboxes/{sandbox}/files/content"
    with daemon.client() as client:
        assert client.put(url, params={"path": "/keep.txt"}, content=b"keep").status_code == 200
        started = time.monotonic()
        response = client.put(url, params={"path": "/big"}, content=b"\0" * (80 * MiB))
        assert response.status_code == 413
        message = response.json()["message"]
        assert "64 MiB disk" in message and sandbox in message, message
        assert time.monotonic() - started < 20

        def stream() -> Iterator[bytes]:
            for _ in range(80):
                yield b"\0" * MiB

        try:
            cut = client.put(url, params={"path": "/big"}, content=stream())
        except httpx.HTTPError:
            pass
        else:
            assert cut.status_code in (413, 507), cut.text
        assert exec_run(client, sandbox, {"shell": "cat /keep.txt; ls /big 2>&1"})[1].startswith(
            "keep"
        )
        listing = exec_run(client, sandbox, {"shell": "test -e /big && echo there || echo gone"})
        assert listing[1] == "gone\n"
    assert healthy(daemon)


def test_a_console_flood_stays_bounded_on_the_host(daemon: Daemon, sandbox: str) -> None:
    console = daemon.data_dir / "sandboxes" / sandbox / "console" / "console.log"
    flood = "head -c 50000000 /dev/zero > /proc/1/fd/1; head -c 50000000 /dev/zero > /proc/1/fd/2"
    with daemon.client() as client:
        code, _, err = exec_run(client, sandbox, {"shell": flood, "timeout": 60})
        # The writes did reach the host file, and the host's bound stopped them.
        assert code != 0 and "No space left on device" in err, err
        assert console.stat().st_size <= CONSOLE_KIB * 1024
        usage = shutil.disk_usage(console.parent)
        assert usage.total <= CONSOLE_KIB * 1024 + 64 * 1024
        assert exec_run(client, sandbox, {"cmd": ["echo", "still here"]})[1] == "still here\n"
        # The runtime trims it: the log gets room again within a few health checks.
        deadline = time.monotonic() + 20
        while console.stat().st_size > CONSOLE_KIB * 512 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert console.stat().st_size <= CONSOLE_KIB * 512


def rss_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


def test_thousands_of_processes_with_huge_tags_are_refused_past_the_bound(
    daemon: Daemon,
) -> None:
    with daemon.client() as client:
        created = client.post("/v1/sandboxes", json={"memory_mib": 1024})
        sbx = created.json()["id"]
        try:
            url = f"/v1/sandboxes/{sbx}/exec"
            huge = client.post(
                url, json={"cmd": ["true"], "tag": "t" * 100_000, "background": True}
            )
            assert huge.status_code == 413 and "'tag'" in huge.json()["message"]
            tag = "t" * 4000

            def start(_: int) -> int:
                body = {"cmd": ["sleep", "600"], "tag": tag, "background": True}
                return client.post(url, json=body).status_code

            with ThreadPoolExecutor(8) as pool:
                codes = list(pool.map(start, range(1100)))
            assert codes.count(201) == 1024, {c: codes.count(c) for c in set(codes)}
            assert set(codes) == {201, 413}
            refused = client.post(url, json={"cmd": ["true"], "background": True})
            assert refused.status_code == 413 and "1024" in refused.json()["message"]
            before = rss_mib(daemon.process.pid)
            for _ in range(5):
                listed = client.get(f"/v1/sandboxes/{sbx}/processes")
                assert listed.status_code == 200 and len(listed.json()["processes"]) == 1024
            assert rss_mib(daemon.process.pid) - before < 200
        finally:
            client.delete(f"/v1/sandboxes/{sbx}")
    assert healthy(daemon)


# -- the sandbox's spec and the docs -----------------------------------------------------------

CAP_NET_RAW, CAP_MKNOD, CAP_SETFCAP, CAP_CHOWN, CAP_SETUID = 13, 27, 31, 0, 7


def test_dropped_capabilities_and_the_open_files_limit_inside(daemon: Daemon, sandbox: str) -> None:
    with daemon.client() as client:
        _, status, _ = exec_run(client, sandbox, {"shell": "cat /proc/self/status | grep Cap"})
        caps = {line.split(":")[0]: int(line.split()[1], 16) for line in status.splitlines()}
        for kind in ("CapBnd", "CapEff", "CapPrm"):
            for dropped in (CAP_NET_RAW, CAP_MKNOD, CAP_SETFCAP):
                assert not caps[kind] & (1 << dropped), (kind, dropped, hex(caps[kind]))
            assert caps[kind] & (1 << CAP_CHOWN) and caps[kind] & (1 << CAP_SETUID)
        _, limits, _ = exec_run(client, sandbox, {"shell": "ulimit -n; ulimit -Hn"})
        assert limits.split() == ["65536", "65536"]
        # The attack CAP_NET_RAW allowed: a raw socket to forge packets on the slot's link.
        raw = "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)"
        code, _, err = exec_run(client, sandbox, {"cmd": ["python3", "-c", raw]})
        assert code != 0 and "PermissionError" in err, err


def test_no_host_python_packages_or_library_dir_inside(daemon: Daemon, sandbox: str) -> None:
    host_site = next(p for p in sys.path if p.endswith("site-packages"))
    with daemon.client() as client:
        _, found, _ = exec_run(
            client,
            sandbox,
            {"shell": "find /.corral -name 'site-packages' -o -name 'dist-packages'; echo end"},
        )
        assert found == "end\n"
        _, libs, _ = exec_run(client, sandbox, {"shell": "ls /.corral/lib | wc -l"})
        assert int(libs) < 20  # the few the agent links, not the host's library dir
        _, listing, _ = exec_run(client, sandbox, {"shell": "ls /.corral /.corral/py/lib/*/"})
        assert "site-packages" not in listing and "tkinter" not in listing
        code, _, _ = exec_run(client, sandbox, {"cmd": ["ls", host_site]})
        assert code != 0


def test_the_interactive_docs_need_a_key(daemon: Daemon) -> None:
    for page in ("/docs", "/redoc"):
        response = httpx.get(daemon.url + page)
        assert response.status_code == 401 and response.json()["code"] == "unauthorized"
        with daemon.client() as client:
            assert client.get(page).status_code == 200
    assert httpx.get(daemon.url + "/openapi.json").status_code == 200
    assert httpx.get(daemon.url + "/healthz").status_code == 200
