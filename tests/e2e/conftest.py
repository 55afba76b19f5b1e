"""A real daemon for end-to-end tests: ``corral serve`` on a free loopback port, with its own data
dir, network prefix and subnet, so it never collides with a daemon the user runs.

At teardown every sandbox it made is killed through the API, the daemon is stopped by its pid,
and the test asserts that no namespace of its prefix is left. The daemon's log is printed when a
test fails.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.host import free_port, free_subnet

REPO = Path(__file__).resolve().parents[2]
CORRAL = str(Path(sys.executable).with_name("corral"))
IMAGES_DIR = Path(os.environ.get("CORRAL_IMAGES_DIR", "/var/lib/corral/images"))

pytestmark = pytest.mark.e2e


@dataclass
class Daemon:
    url: str
    key: str
    data_dir: Path
    prefix: str
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CORRAL_URL": self.url, "CORRAL_API_KEY": self.key}

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=60
        )

    def cli(
        self, *args: str, input: bytes | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [CORRAL, *args], input=input, capture_output=True, env=self.env, timeout=timeout
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def start_daemon(
    data_dir: Path,
    prefix: str,
    subnet: str | None = None,
    port: int | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> Daemon:
    """`extra_env` adds to the daemon's environment (e.g. the crash hook ``CORRAL_CRASH_AT``)."""
    port = port or free_port()
    subnet = subnet or free_subnet()
    log_path = data_dir.parent / f"{data_dir.name}.log"
    env = {
        **os.environ,
        "CORRAL_IMAGES_DIR": str(IMAGES_DIR),
        "CORRAL_NETWORK_PREFIX": prefix,
        "CORRAL_NETWORK_SUBNET": subnet,
        "CORRAL_LOG_LEVEL": "debug",
        # A known memory total, so that capacity refusals are deterministic.
        "CORRAL_MEMORY_MIB": "12288",
        **(extra_env or {}),
    }
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [CORRAL, "serve", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}"],
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daemon exited {process.returncode}:\n{log_path.read_text()}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    else:
        process.kill()
        raise RuntimeError(f"daemon did not answer in 60 s:\n{log_path.read_text()}")
    key = (data_dir / "admin.key").read_text().strip()
    return Daemon(url, key, data_dir, prefix, log_path, process)


def stop_daemon(daemon: Daemon, *, kill_sandboxes: bool = True) -> None:
    if kill_sandboxes and daemon.process.poll() is None:
        with daemon.client() as client:
            try:
                # Pools refill: remove pooled templates first, then every sandbox.
                for template in client.get("/v1/templates").json()["templates"]:
                    if template.get("pool"):
                        client.delete(f"/v1/templates/{template['name']}")
                listed = client.get("/v1/sandboxes", params={"include_pooled": True})
                for sbx in listed.json()["sandboxes"]:
                    if sbx["state"] not in ("killed",):
                        client.delete(f"/v1/sandboxes/{sbx['id']}")
            except httpx.HTTPError:
                pass
    if daemon.process.poll() is None:
        daemon.process.send_signal(signal.SIGTERM)
        try:
            daemon.process.wait(30)
        except subprocess.TimeoutExpired:
            daemon.process.kill()
            daemon.process.wait()


def leftover_namespaces(prefix: str) -> list[str]:
    """What a stopped daemon with no sandboxes left of its network: namespaces of its prefix
    and its nft table in the host's namespace (named ``nft:<prefix>``)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left = [line.split()[0] for line in out.splitlines() if line.startswith(prefix + "-")]
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    left += [f"nft:{prefix}" for line in tables.splitlines() if line.split()[-1:] == [prefix]]
    return left


def clear_leftovers(prefix: str) -> list[str]:
    """Remove what a stopped daemon left of its network; returns what there was (for an assert)."""
    left = leftover_namespaces(prefix)
    for name in left:
        if name.startswith("nft:"):
            subprocess.run(["nft", "delete", "table", "inet", prefix], check=False)
        else:
            subprocess.run(["ip", "netns", "del", name], check=False)
    return left


@contextmanager
def running_daemon(
    data_dir: Path,
    prefix: str,
    subnet: str | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[Daemon]:
    """A test's private daemon: started, yielded, stopped with its sandboxes killed, and checked
    to have left no namespace or nft table behind (removed either way)."""
    if not (IMAGES_DIR / "base" / "image.json").exists():
        raise RuntimeError(f"the base image is missing from {IMAGES_DIR}: run ./scripts/setup")
    daemon = start_daemon(data_dir, prefix, subnet=subnet, extra_env=extra_env)
    try:
        yield daemon
    finally:
        stop_daemon(daemon)
        left = clear_leftovers(prefix)
        assert not left, f"namespaces left behind: {left}\n{daemon.log()[-4000:]}"


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    if not (IMAGES_DIR / "base" / "image.json").exists():
        raise RuntimeError(f"the base image is missing from {IMAGES_DIR}: run ./scripts/setup")
    with running_daemon(
        tmp_path_factory.mktemp("daemon") / "data", "ce" + secrets.token_hex(2)
    ) as d:
        yield d


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.failed and "daemon" in getattr(item, "fixturenames", ()):
        daemon = item.funcargs.get("daemon") if hasattr(item, "funcargs") else None
        if isinstance(daemon, Daemon):
            report.sections.append(("daemon log (tail)", daemon.log()[-6000:]))
    return report


CODE_TEMPLATE = "ci"


@pytest.fixture(scope="session")
def code_template(daemon: Daemon) -> str:
    """A template built ``--with code-interpreter`` in the session's daemon, once (the slow
    part: pip in a build sandbox), shared by corral's and E2B's code-interpreter tests."""
    from corral import Client
    from corral.sdk.templates import Template

    client = Client(url=daemon.url, api_key=daemon.key)
    made = Template.build(
        Template().with_recipe("code-interpreter"), CODE_TEMPLATE, client=client, step_timeout=1200
    )
    assert made.warm and made.labels["corral.interpreter.port"] == "49999"
    return CODE_TEMPLATE
