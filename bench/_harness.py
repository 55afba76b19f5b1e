"""Shared bench helpers: a private daemon, raw runsc baselines, and statistics.

Benchmarks print figures and ratios against baselines measured in the same run; they assert
nothing about speed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

CORRAL = str(Path(sys.executable).with_name("corral"))
IMAGES_DIR = Path(os.environ.get("CORRAL_IMAGES_DIR", "/var/lib/corral/images"))
BASE_ROOTFS = IMAGES_DIR / "base" / "rootfs"


def _terminate_as_interrupt(_sig: int, _frame: object) -> None:
    raise KeyboardInterrupt


# A bench stopped with SIGTERM (`timeout`, a CI runner, kill) runs its cleanup like Ctrl-C: the
# private daemon's sandboxes and the raw runsc containers it made are removed, not left running.
if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


@dataclass
class Figures:
    name: str
    samples_ms: list[float]

    @property
    def p50(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p99(self) -> float:
        return percentile(self.samples_ms, 99)


def timed(fn: Callable[[], object], runs: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def timed_inner(fn: Callable[[], float], runs: int, warmup: int = 2) -> list[float]:
    """Like ``timed``, for functions that time themselves: ``fn`` returns its own ms."""
    for _ in range(warmup):
        fn()
    return [fn() for _ in range(runs)]


def report(rows: list[tuple[Figures, Figures | None]]) -> None:
    """Each measure with its ratio to its baseline; the baselines themselves first."""
    baselines: list[Figures] = []
    for _, baseline in rows:
        if baseline is not None and all(b is not baseline for b in baselines):
            baselines.append(baseline)
    width = max([44, *(len(f.name) for f, _ in rows), *(len(b.name) for b in baselines)])
    print(f"{'measure':{width}} {'p50 ms':>9} {'p99 ms':>9} {'ratio p50':>10}")
    for baseline in baselines:
        print(f"{baseline.name:{width}} {baseline.p50:9.2f} {baseline.p99:9.2f} {'(baseline)':>10}")
    for figures, baseline in rows:
        ratio = f"{figures.p50 / baseline.p50:9.2f}x" if baseline else ""
        print(f"{figures.name:{width}} {figures.p50:9.2f} {figures.p99:9.2f} {ratio:>10}")


def free_subnet() -> str:
    """A /16 nothing on this host routes yet (tests or other daemons may be running)."""
    from corral.network.conflicts import foreign_routes

    for _ in range(50):
        subnet = f"10.{secrets.randbelow(136) + 64}.0.0/16"
        if not foreign_routes("zz", subnet):
            return subnet
    raise RuntimeError("no free 10.x.0.0/16 subnet for a bench daemon")


@contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block is done (a cleanup that must not be cut short);
    outside the main thread, where handlers cannot be set, nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, previous in held.items():
            signal.signal(sig, previous)


@dataclass
class Daemon:
    url: str
    key: str
    process: subprocess.Popen[bytes]
    data_dir: Path


@contextmanager
def private_daemon(settings: dict[str, str] | None = None) -> Iterator[Daemon]:
    """A daemon of its own (data dir, port, network prefix) that is stopped and cleaned after.

    ``settings``: extra ``CORRAL_*`` variables for it (e.g. a larger CPU overcommit)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data_dir = Path(tempfile.mkdtemp(prefix="corral-bench-"))
    env = {
        **os.environ,
        "CORRAL_IMAGES_DIR": str(IMAGES_DIR),
        "CORRAL_NETWORK_PREFIX": "cb" + secrets.token_hex(2),
        "CORRAL_NETWORK_SUBNET": free_subnet(),
        **(settings or {}),
    }
    log = open(data_dir.with_suffix(".log"), "wb")  # noqa: SIM115 (closed in the finally below)
    command = [
        CORRAL,
        "serve",
        "--data-dir",
        str(data_dir / "data"),
        "--listen",
        f"127.0.0.1:{port}",
    ]
    url = f"http://127.0.0.1:{port}"

    def start() -> subprocess.Popen[bytes]:
        started = subprocess.Popen(command, stdout=log, stderr=log, env=env)
        for _ in range(600):
            if started.poll() is not None:
                break
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        return started

    process = start()
    failed, key = False, ""
    try:
        key = (data_dir / "data" / "admin.key").read_text().strip()
        yield Daemon(url, key, process, data_dir)
    except Exception:  # kept for a failure, not for Ctrl-C
        failed = True
        raise
    finally:
        with signals_held():
            if process.poll() is not None and key:
                # A daemon that died leaves its sandboxes running (frozen ones stuck in the
                # freezer). The same daemon started again on its data dir adopts them (and thaws
                # the frozen), so the usual API teardown below can remove every one.
                failed = True
                print(
                    f"the bench daemon died (exit {process.returncode}); starting it again "
                    "on its data dir to remove its sandboxes",
                    file=sys.stderr,
                )
                process = start()
            _stop_daemon(url, key, process)
        log.close()
        # The daemon's runsc state dir (keyed as GVisorRuntime keys it); removed once empty.
        sandboxes = (data_dir / "data" / "sandboxes").resolve()
        state = Path("/run/corral") / hashlib.sha256(str(sandboxes).encode()).hexdigest()[:12]
        with contextlib.suppress(OSError):
            state.rmdir()
        shutil.rmtree(data_dir, ignore_errors=True)
        if failed:
            print(f"the bench daemon's log is kept at {log.name}", file=sys.stderr)
        else:
            Path(log.name).unlink(missing_ok=True)


def _stop_daemon(url: str, key: str, process: subprocess.Popen[bytes]) -> None:
    """Remove every sandbox and pooled template of the daemon, then stop it."""
    try:
        headers = {"Authorization": f"Bearer {key}"}
        # Pools refill: remove pooled templates first, then every sandbox, pooled ones too.
        templates = httpx.get(url + "/v1/templates", headers=headers).json()["templates"]
        for template in templates:
            if template.get("pool"):
                httpx.delete(f"{url}/v1/templates/{template['name']}", headers=headers)
        listed = httpx.get(
            url + "/v1/sandboxes", headers=headers, params={"include_pooled": True}
        ).json()["sandboxes"]
        for sbx in listed:
            if sbx["state"] != "killed":
                httpx.delete(f"{url}/v1/sandboxes/{sbx['id']}", headers=headers, timeout=60)
    except Exception as exc:
        print(f"warning: removing the bench daemon's sandboxes: {exc!r}", file=sys.stderr)
    process.send_signal(signal.SIGTERM)
    process.wait(30)


class RawRunsc:
    """Raw ``runsc`` on the same base image and platform, for baselines."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="corral-bench-runsc-"))
        self.counter = 0
        self.bundles: dict[str, Path] = {}
        self.live: set[str] = set()  # containers started detached and not deleted yet

    def _bundle(self, args: list[str]) -> Path:
        self.counter += 1
        bundle = self.root / f"b{self.counter:05d}"
        bundle.mkdir()
        subprocess.run(["runsc", "spec", "-bundle", str(bundle), "--", *args], check=True)
        config = json.loads((bundle / "config.json").read_text())
        config["root"] = {"path": str(BASE_ROOTFS), "readonly": False}
        config["process"]["terminal"] = False
        (bundle / "config.json").write_text(json.dumps(config))
        return bundle

    def _base(self) -> list[str]:
        return [
            "runsc",
            "--root",
            str(self.root / "state"),
            "--platform=systrap",
            "--network=none",
            "--overlay2=root:memory",
        ]

    def run(self, args: list[str]) -> bytes:
        bundle = self._bundle(args)
        cid = f"raw{self.counter:05d}"
        out = subprocess.run(
            [*self._base(), "run", "-bundle", str(bundle), cid], capture_output=True, check=True
        )
        subprocess.run([*self._base(), "delete", "-force", cid], capture_output=True)
        shutil.rmtree(bundle, ignore_errors=True)
        return out.stdout

    def run_first_output(self, args: list[str], expected: bytes) -> float:
        """ms from starting ``runsc run`` until ``expected`` was read from the container's
        stdout; bundle preparation, the rest of the run and the delete are not counted."""
        bundle = self._bundle(args)
        cid = f"raw{self.counter:05d}"
        started = time.perf_counter()
        proc = subprocess.Popen(
            [*self._base(), "run", "-bundle", str(bundle), cid],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        seen = b""
        while expected not in seen:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"runsc run of {args} ended without printing {expected!r}")
            seen += chunk
        elapsed = (time.perf_counter() - started) * 1000
        proc.communicate()
        subprocess.run([*self._base(), "delete", "-force", cid], capture_output=True)
        shutil.rmtree(bundle, ignore_errors=True)
        return elapsed

    def start_idle(self) -> str:
        bundle = self._bundle(["sleep", "100000"])
        cid = f"raw{self.counter:05d}"
        self.bundles[cid] = bundle
        self.live.add(cid)  # before the run: a run cut short may still leave it behind
        subprocess.run(
            [*self._base(), "run", "-detach", "-bundle", str(bundle), cid],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return cid

    def start_detached(self, args: list[str]) -> str:
        """A running container of ``args`` (its bundle is kept for restores)."""
        bundle = self._bundle(args)
        cid = f"raw{self.counter:05d}"
        self.bundles[cid] = bundle
        self.live.add(cid)  # before the run: a run cut short may still leave it behind
        subprocess.run(
            [*self._base(), "run", "-detach", "-bundle", str(bundle), cid],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return cid

    def checkpoint(
        self, cid: str, image_dir: Path, *, leave_running: bool = False, compress: bool = True
    ) -> float:
        """ms of ``runsc checkpoint`` of ``cid`` into ``image_dir`` (``compress=False``:
        ``--compression none``, as corral takes a warm template's image; else runsc's default)."""
        image_dir.mkdir(parents=True, exist_ok=True)
        args = [*self._base(), "checkpoint", "--image-path", str(image_dir)]
        if leave_running:
            args.append("--leave-running")
        if not compress:
            args.append("--compression=none")
        started = time.perf_counter()
        subprocess.run([*args, cid], check=True, capture_output=True)
        return (time.perf_counter() - started) * 1000

    def restore(self, image_dir: Path, like: str) -> tuple[str, float]:
        """Restore ``image_dir`` into a new container on ``like``'s bundle; (its id, ms)."""
        self.counter += 1
        cid = f"raw{self.counter:05d}"
        bundle = self.bundles[like]
        self.bundles[cid] = bundle
        self.live.add(cid)
        started = time.perf_counter()
        restore = ["restore", "-detach", "--image-path", str(image_dir), "-bundle", str(bundle)]
        subprocess.run(
            [*self._base(), *restore, cid],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return cid, (time.perf_counter() - started) * 1000

    def process_token(self, cid: str) -> str:
        """What the command line of every host process of ``cid`` (started by ``start_idle``
        or ``start_detached``) names: its bundle path. Not the id: runsc's gofer does not name
        it (its memory would go uncounted), and other benches' containers may have the same id."""
        return str(self.bundles[cid])

    def exec(self, cid: str, args: list[str]) -> None:
        subprocess.run([*self._base(), "exec", cid, *args], check=True, capture_output=True)

    def delete(self, cid: str) -> None:
        subprocess.run([*self._base(), "delete", "-force", cid], capture_output=True)
        self.live.discard(cid)

    def close(self) -> None:
        """Delete every container still running (a bench cut short), then the state and
        bundles; with Ctrl-C and SIGTERM held off, so that nothing is left running."""
        with signals_held():
            for cid in sorted(self.live):
                self.delete(cid)
            shutil.rmtree(self.root, ignore_errors=True)
