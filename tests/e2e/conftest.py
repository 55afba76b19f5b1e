"""A real daemon for end-to-end tests: ``corral serve`` on a free loopback port, with its own data
dir, network prefix and subnet, so it never collides with a daemon the user runs.

At teardown every sandbox it made is killed through the API, the daemon is stopped by its pid,
and the test asserts that no namespace of its prefix is left. The daemon's log is printed when a
test fails.
"""

from __future__ import annotations

import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from corral.sdk.models import TemplateInfo
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


# Opens argv[1] descriptors (inheritable, on /dev/null), then becomes the program in argv[2:].
HOLD_FDS = """
import os, resource, sys
count = int(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < count + 4096:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 8192), hard))
for _ in range(count):
    os.set_inheritable(os.open("/dev/null", os.O_RDONLY), True)
os.execv(sys.argv[2], sys.argv[2:])
"""


def start_daemon(
    data_dir: Path,
    prefix: str,
    subnet: str | None = None,
    port: int | None = None,
    extra_env: Mapping[str, str] | None = None,
    held_fds: int = 0,
) -> Daemon:
    """`extra_env` adds to the daemon's environment (e.g. the crash hook ``CORRAL_CRASH_AT``);
    with `held_fds` the daemon starts with that many descriptors open already (as if it held
    hundreds of sandboxes), so every descriptor it opens is numbered above them."""
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
    command = [CORRAL, "serve", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}"]
    if held_fds:
        command = [sys.executable, "-c", HOLD_FDS, str(held_fds), *command]
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120  # a loaded host imports and starts slowly
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
        raise RuntimeError(f"daemon did not answer in 120 s:\n{log_path.read_text()}")
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
    held_fds: int = 0,
) -> Iterator[Daemon]:
    """A test's private daemon: started, yielded, stopped with its sandboxes killed, and checked
    to have left no namespace or nft table behind (removed either way)."""
    if not (IMAGES_DIR / "base" / "image.json").exists():
        raise RuntimeError(f"the base image is missing from {IMAGES_DIR}: run ./scripts/setup")
    daemon = start_daemon(data_dir, prefix, subnet=subnet, extra_env=extra_env, held_fds=held_fds)
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


class BackgroundBuilds:
    """Template builds from recipes, in a daemon of their own and a thread of their own, started
    as soon as the e2e session starts and waited for by the fixture that needs the template.

    A build takes minutes (downloads, pip and npm in a build sandbox) and mostly waits, so it
    runs while the other tests do; one build at a time, in the order asked, so that on a small
    machine the tests keep a CPU. The daemon is its own so that the builds' sandboxes and
    capacity reservations never show in what the shared daemon's tests list and count; the
    tests of a built template run on this daemon (their module's ``daemon`` is ``builds.daemon``).
    """

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._done: dict[str, threading.Event] = {}
        self._failures: dict[str, BaseException] = {}
        self._made: dict[str, TemplateInfo] = {}
        self._worker = threading.Thread(target=self._build_each, name="builds", daemon=True)
        self._worker.start()

    def _build_each(self) -> None:
        from corral import Client
        from corral.sdk.templates import Template

        with Client(url=self.daemon.url, api_key=self.daemon.key) as client:
            while (asked := self._queue.get()) is not None:
                recipe, name = asked
                try:
                    self._made[recipe] = Template.build(
                        Template().with_recipe(recipe), name, client=client, step_timeout=1200
                    )
                except BaseException as exc:  # handed to whoever waits for this build
                    self._failures[recipe] = exc
                finally:
                    self._done[recipe].set()

    def start(self, recipe: str, name: str) -> None:
        if recipe not in self._done:
            self._done[recipe] = threading.Event()
            self._queue.put((recipe, name))

    def wait(self, recipe: str, name: str) -> TemplateInfo:
        """The template built from ``recipe`` (asked for now if it was not yet); the build's
        error if it failed."""
        self.start(recipe, name)
        self._done[recipe].wait()
        if recipe in self._failures:
            raise RuntimeError(f"building template {name!r} from recipe {recipe!r} failed") from (
                self._failures[recipe]
            )
        return self._made[recipe]

    def stop(self, timeout: float) -> None:
        """No more builds; wait up to ``timeout`` for the one going on (its daemon stopped)."""
        self._queue.put(None)
        self._worker.join(timeout)


# Which fixture needs which background build: (recipe, template name).
RECIPE_BUILDS = {"code_template": ("code-interpreter", "ci"), "dev_template": ("dev", "devbox")}


@pytest.fixture(scope="session")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundBuilds]:
    data_dir = tmp_path_factory.mktemp("builds") / "data"
    with running_daemon(data_dir, "cy" + secrets.token_hex(2)) as daemon:
        made = BackgroundBuilds(daemon)
        try:
            yield made
        finally:
            stop_daemon(daemon)  # ends a build still going (a session cut short)
            made.stop(60)


@pytest.fixture(scope="session", autouse=True)
def _start_builds_early(request: pytest.FixtureRequest) -> None:
    """Start, with the first e2e test, every build that a collected test will need."""
    wanted = {
        RECIPE_BUILDS[name]
        for item in request.session.items
        for name in getattr(item, "fixturenames", ())
        if name in RECIPE_BUILDS
    }
    if wanted:
        builds: BackgroundBuilds = request.getfixturevalue("builds")
        for recipe, name in sorted(wanted):
            builds.start(recipe, name)


@pytest.fixture(scope="session")
def code_template(builds: BackgroundBuilds) -> str:
    """A template built ``--with code-interpreter`` (the slow part: pip in a build sandbox), once,
    in the builds daemon; shared by corral's and E2B's code-interpreter tests."""
    made = builds.wait(*RECIPE_BUILDS["code_template"])
    assert made.warm and made.labels["corral.interpreter.port"] == "49999"
    return made.name


@pytest.fixture(scope="session")
def dev_template(builds: BackgroundBuilds) -> str:
    """A template built from the ``dev`` recipe (apt, PyPI and npm), in the builds daemon."""
    return builds.wait(*RECIPE_BUILDS["dev_template"]).name
