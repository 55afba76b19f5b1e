"""The agent channel answers only the daemon (issue 7): attacks on it, performed against a real
daemon, each seen to fail.

- an unprivileged host user cannot even connect to a sandbox's slot address (the host's nft
  output rule lets only root in), and root without the sandbox's agent key gets 401 and runs
  nothing;
- a non-root process inside the sandbox cannot drive its own agent (401) and finds its key in
  none of /proc/1/*, its environment or the files it can read;
- every restore is rekeyed: forks have keys and boot ids of their own, the source's key works on
  none of them, and a wake replaces the key;
- a ``--secret-env`` value is found in no file of the data dir or runsc's state dir (only in the
  parked memory image, 0600 under 0700, which uid 65534 cannot read).

Probes go only to the slot addresses this test's daemon made and to loopback inside a sandbox.
"""

from __future__ import annotations

import ast
import ipaddress
import json
import secrets
import shutil
import sqlite3
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corral import Client, Conflict
from corral.agent import AGENT_PORT
from tests.e2e.conftest import Daemon, free_subnet, running_daemon

pytestmark = pytest.mark.e2e

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
HOST_PYTHON = "/usr/bin/python3"  # readable by uid 65534, unlike a virtualenv under /root
SUBNETS: dict[str, str] = {}  # the slot subnet of each test daemon, by its network prefix


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    prefix = "ca" + secrets.token_hex(2)
    SUBNETS[prefix] = free_subnet()
    # Parents that uid 65534 may traverse (pytest's own temp dir is 0700): then only the data
    # dir's own modes can keep it out, and the greps below as 65534 test those.
    parent = Path(tempfile.mkdtemp(prefix="corral-agentauth-", dir="/var/tmp"))
    try:
        parent.chmod(0o711)
        with running_daemon(parent / "data", prefix, subnet=SUBNETS[prefix]) as daemon:
            yield daemon
    finally:
        shutil.rmtree(parent, ignore_errors=True)


# -- helpers ---------------------------------------------------------------------------------------


def slot_address(daemon: Daemon, sandbox_id: str) -> str:
    """The host-side address of the sandbox's slot (``A.2`` of its /30, see network/slots.py)."""
    db = sqlite3.connect(daemon.data_dir / "corral.db")
    try:
        row = db.execute("SELECT slot_index FROM sandboxes WHERE id = ?", (sandbox_id,)).fetchone()
    finally:
        db.close()
    assert row is not None and row[0] is not None, f"sandbox {sandbox_id} has no slot"
    subnet = ipaddress.IPv4Network(SUBNETS[daemon.prefix])
    return str(subnet.network_address + 4 * int(row[0]) + 2)


def agent_key(daemon: Daemon, sandbox_id: str) -> str:
    return (daemon.data_dir / "agent-keys" / sandbox_id).read_text().strip()


def ask_agent(
    address: str, method: str, path: str, key: str | None = None, body: object = None
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=f"http://{address}:{AGENT_PORT}", timeout=10) as http:
        return http.request(method, path, headers=headers, json=body)


def exists_inside(sbx: object, path: str) -> bool:
    result = sbx.exec(["test", "-e", path])  # type: ignore[attr-defined]
    return bool(result.exit_code == 0)


# -- (a) the host side ----------------------------------------------------------------------------

HOST_PROBE = r"""
import json, socket, sys
address, results = sys.argv[1], {}
for port in map(int, sys.argv[2:]):
    sock = socket.socket()
    sock.settimeout(5)
    try:
        sock.connect((address, port))
        body = b'{"cmd": ["touch", "/tmp/pwned-by-host-user"]}'
        sock.sendall(b"POST /processes HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(body), body))
        results[port] = "connected: " + sock.recv(200).decode(errors="replace")
    except OSError as exc:
        results[port] = type(exc).__name__
    finally:
        sock.close()
print(json.dumps(results))
"""


def test_host_users_cannot_reach_a_sandbox_and_root_needs_its_key(daemon: Daemon) -> None:
    with Client(daemon.url, daemon.key) as client:
        sbx = client.create_sandbox(memory_mib=256)
        try:
            address = slot_address(daemon, sbx.id)
            probe = subprocess.run(
                [*NOBODY, HOST_PYTHON, "-I", "-c", HOST_PROBE, address, str(AGENT_PORT), "8080"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert probe.returncode == 0, probe.stderr
            results = json.loads(probe.stdout)
            # Refused at once by the host's own rules (a TCP reset), never connected.
            assert results == {
                str(AGENT_PORT): "ConnectionRefusedError",
                "8080": "ConnectionRefusedError",
            }

            # Root reaches the agent, but without the key it answers 401 and runs nothing.
            for key in (None, "0" * 64, secrets.token_hex(32)):
                refused = ask_agent(
                    address, "POST", "/processes", key, {"cmd": ["touch", "/tmp/pwned-by-root"]}
                )
                assert refused.status_code == 401
                assert refused.json()["code"] == "unauthorized"
            assert ask_agent(address, "GET", "/health").json() == {"ok": True}
            assert not exists_inside(sbx, "/tmp/pwned-by-root")
            assert not exists_inside(sbx, "/tmp/pwned-by-host-user")
            # The daemon's key does work: the channel is there, only closed to others.
            health = ask_agent(address, "GET", "/health", agent_key(daemon, sbx.id))
            assert health.json()["pid"] == 1
        finally:
            sbx.kill()


# -- (b) inside the sandbox -----------------------------------------------------------------------

INNER_PROBE = r"""
import os, re, socket
hexkey = re.compile(rb"[0-9a-f]{64}")
found = set()
def scan(data):
    found.update(m.decode() for m in hexkey.findall(data))
report = {"uid": os.getuid(), "answers": {}, "proc1": {}}
body = b'{"cmd": ["touch", "/tmp/pwned-from-inside"], "user": "root"}'
for host in ("127.0.0.1", "169.254.0.21"):
    for auth in (b"", b"Authorization: Bearer " + b"0" * 64 + b"\r\n"):
        sock = socket.create_connection((host, 49983), timeout=10)
        sock.sendall(b"POST /processes HTTP/1.1\r\nHost: a\r\n" + auth
                     + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        report["answers"][host + (" guessed" if auth else " none")] = (
            sock.recv(200).split(b"\r\n")[0].decode())
        sock.close()
for name in sorted(os.listdir("/proc/1")):
    path = "/proc/1/" + name
    try:
        if os.path.isdir(path):
            entries = os.listdir(path)
            scan(" ".join(entries).encode())
            for entry in entries:
                try:
                    scan(os.readlink(path + "/" + entry).encode())
                except OSError:
                    pass
            report["proc1"][name] = "listed"
        else:
            with open(path, "rb") as fh:
                data = fh.read(1 << 20)
            scan(data)
            report["proc1"][name] = len(data)
    except OSError as exc:
        report["proc1"][name] = type(exc).__name__
scan("\n".join(f"{k}={v}" for k, v in os.environ.items()).encode())
# Where anything running in the sandbox could have written (the image's own files are the
# template's, shared read-only by every sandbox, and the agent writes no file).
for top in ("/tmp", "/var/tmp", "/run", "/root", "/home", "/etc", "/dev/shm", "/.corral/agent"):
    for root, dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            try:
                if os.path.islink(path) or os.path.getsize(path) > (4 << 20):
                    continue
                with open(path, "rb") as fh:
                    scan(fh.read())
            except OSError:
                pass
report["found"] = sorted(found)
print(repr(report))  # the image's python3-minimal has no json
"""


def test_a_non_root_process_inside_cannot_drive_its_agent_or_find_its_key(daemon: Daemon) -> None:
    with Client(daemon.url, daemon.key) as client:
        sbx = client.create_sandbox(memory_mib=256)
        try:
            result = sbx.exec(["python3", "-I", "-c", INNER_PROBE], user="nobody", timeout=120)
            assert result.exit_code == 0, result.stderr
            report = ast.literal_eval(result.stdout)
            assert report["uid"] == 65534
            assert set(report["answers"].values()) == {"HTTP/1.1 401 Unauthorized"}
            assert not exists_inside(sbx, "/tmp/pwned-from-inside")
            # The agent's memory is not readable by another uid; its key is nowhere to be read.
            assert report["proc1"]["mem"] in ("PermissionError", "FileNotFoundError")
            key = agent_key(daemon, sbx.id)
            assert key not in report["found"]
            # The same probe as root finds no key in files, env or cmdline either (only root could
            # read the agent's memory, and root in the sandbox is the agent's equal anyway).
            as_root = sbx.exec(["python3", "-I", "-c", INNER_PROBE], timeout=120)
            assert as_root.exit_code == 0, as_root.stderr
            assert key not in ast.literal_eval(as_root.stdout)["found"]
        finally:
            sbx.kill()


# -- (c) restores are rekeyed ---------------------------------------------------------------------


def test_forks_and_wakes_get_keys_and_boot_ids_of_their_own(daemon: Daemon) -> None:
    with Client(daemon.url, daemon.key) as client:
        source = client.create_sandbox(memory_mib=256)
        children = []
        try:
            source_key = agent_key(daemon, source.id)
            source_address = slot_address(daemon, source.id)
            source_boot = ask_agent(source_address, "GET", "/health", source_key).json()["boot_id"]
            children = source.fork(2)
            keys = [agent_key(daemon, child.id) for child in children]
            addresses = [slot_address(daemon, child.id) for child in children]
            assert len({source_key, *keys}) == 3
            boots = []
            for index, (key, address) in enumerate(zip(keys, addresses, strict=True)):
                boots.append(ask_agent(address, "GET", "/health", key).json()["boot_id"])
                other = keys[1 - index]
                for stale in (source_key, other):
                    refused = ask_agent(address, "POST", "/processes", stale, {"cmd": ["true"]})
                    assert refused.status_code == 401
            assert len({source_boot, *boots}) == 3
            for child in children:
                assert child.exec("echo forked").stdout == "forked\n"

            source.park()
            assert not (daemon.data_dir / "agent-keys" / source.id).exists()
            source.wake()
            woken_key = agent_key(daemon, source.id)
            assert woken_key != source_key
            address = slot_address(daemon, source.id)
            assert ask_agent(address, "GET", "/processes", source_key).status_code == 401
            assert ask_agent(address, "GET", "/processes", woken_key).status_code == 200
        finally:
            for child in children:
                child.kill()
            source.kill()
        assert not (daemon.data_dir / "agent-keys" / source.id).exists()


# -- (d) secrets at rest --------------------------------------------------------------------------


def grep(paths: list[Path], value: str, *, as_nobody: bool = False) -> list[str]:
    """Files below ``paths`` that contain ``value`` (grep exits 1 when none does)."""
    argv = ["grep", "-r", "-l", "-a", "-F", "--", value, *map(str, paths)]
    if as_nobody:
        argv = NOBODY + argv
    found = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert found.returncode in (0, 1, 2), found.stderr
    return found.stdout.splitlines()


def runsc_state_dirs() -> list[Path]:
    root = Path("/run/corral")
    return [root] if root.is_dir() else []


def test_secret_env_values_are_written_to_no_file(daemon: Daemon) -> None:
    value = "agentauth-" + secrets.token_hex(16)
    with Client(daemon.url, daemon.key) as client:
        sbx = client.create_sandbox(memory_mib=256, secret_env={"SECRET_VALUE": value})
        try:
            assert sbx.exec("echo $SECRET_VALUE").stdout == f"{value}\n"
            places = [daemon.data_dir, *runsc_state_dirs()]
            assert grep(places, value) == []
            reach = subprocess.run([*NOBODY, "test", "-e", str(daemon.data_dir)])
            assert reach.returncode == 0  # 65534 gets as far as the data dir itself
            assert grep(places, value, as_nobody=True) == []
            config = next((daemon.data_dir / "sandboxes" / sbx.id).rglob("config.json"))
            assert value not in config.read_text()
            # Not in the agent's environment either (only in its memory and its children's env).
            environ = sbx.exec(["cat", "/proc/1/environ"]).stdout
            assert value not in environ and "SECRET_VALUE" not in environ

            with pytest.raises(Conflict, match="secret"):
                sbx.fork(1)

            sbx.park()
            image = daemon.data_dir / "parked" / sbx.id
            assert stat.S_IMODE(image.stat().st_mode) == 0o700
            assert stat.S_IMODE(image.parent.stat().st_mode) == 0o700
            for path in image.rglob("*"):
                mode = stat.S_IMODE(path.lstat().st_mode)
                assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
            # Only the parked memory holds it; uid 65534 cannot read that (or anything here).
            assert {Path(p).parent for p in grep(places, value)} <= {image}
            assert grep(places, value, as_nobody=True) == []
            unreadable = subprocess.run(
                [*NOBODY, "cat", str(next(p for p in image.rglob("*") if p.is_file()))],
                capture_output=True,
            )
            assert unreadable.returncode != 0

            sbx.wake()  # the secret lives on in the agent's memory
            assert sbx.exec("echo $SECRET_VALUE").stdout == f"{value}\n"
            assert grep(places, value) == []
        finally:
            sbx.kill()
