"""The agent's start: configuration, its duties as PID 1, and the serving loop.

Its key comes on stdin (``keys.py``), which it reads first and replaces with /dev/null.
Configuration comes from the environment: ``CORRAL_AGENT_PORT`` (default 49983),
``CORRAL_AGENT_HOST`` (default 0.0.0.0) and ``CORRAL_AGENT_DISK_ROOT`` (the sized disk to move
the root onto before anything else, ``disk_root.py``); every other variable it was started with
is the default environment of the processes it starts (``PUT /config`` replaces it). As PID 1 it
survives stray signals; elsewhere (tests, debugging) it makes itself a child subreaper so
orphans still come to it.
"""

from __future__ import annotations

import _signal
import os
import sys
import threading

from .cpus import present_cpus
from .disk_root import drop_sys_admin, enter_disk_root, has_sys_admin
from .fields import ENV_PREFIX
from .http import Server
from .keys import read_boot_key
from .processes import Agent
from .routes import VERSION, Handler

DEFAULT_PORT = 49983
DEFAULT_HOST = "0.0.0.0"


def _ignore_signal(signum: int, frame: object) -> None:
    pass


def guard_init_signals() -> None:
    """As PID 1, survive stray signals from inside the sandbox (``kill -INT 1``...).

    Python's own SIGINT handler would raise KeyboardInterrupt in the accept loop and end the
    sandbox. Handlers rather than SIG_IGN: caught signals return to their defaults in children on
    exec, ignored ones would be inherited. Stopping a sandbox is the runtime's SIGKILL.
    """
    if os.getpid() != 1:
        return
    for signum in (
        _signal.SIGINT,
        _signal.SIGTERM,
        _signal.SIGHUP,
        _signal.SIGUSR1,
        _signal.SIGUSR2,
    ):
        _signal.signal(signum, _ignore_signal)


def become_subreaper() -> None:
    """When not PID 1 (tests, debugging), still adopt orphans so they are reaped here."""
    if os.getpid() == 1:
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:  # best effort: without it orphans go to the real init
        pass


def settle_root() -> None:
    """Move onto the sandbox's sized disk when the runtime asks, then give up CAP_SYS_ADMIN
    (granted for that alone). A failed move leaves the image's root (logged); a failed drop
    ends the agent: it never serves with the capability."""
    disk = os.environ.get(ENV_PREFIX + "DISK_ROOT")
    if not disk and not has_sys_admin():
        present_cpus(dict(os.environ), bind_sysfs=False)
        return
    if disk:
        try:
            enter_disk_root(disk)
        except Exception as exc:  # any failure leaves the image's root
            print(f"corral agent: root stays on the image: {exc}", file=sys.stderr, flush=True)
    present_cpus(dict(os.environ), bind_sysfs=True)
    drop_sys_admin()


def main() -> int:
    port = int(os.environ.get(ENV_PREFIX + "PORT") or DEFAULT_PORT)
    host = os.environ.get(ENV_PREFIX + "HOST") or DEFAULT_HOST
    threading.stack_size(512 * 1024)
    guard_init_signals()
    become_subreaper()
    settle_root()
    key = read_boot_key()  # first: fd 0 is /dev/null before anything can start a child
    agent = Agent(dict(os.environ), key)
    agent.start()
    server = Server((host, port), lambda connection: Handler(connection, agent))
    keyed = "" if key is not None else " WITHOUT A KEY (it will answer nothing)"
    print(f"corral agent {VERSION} listening on {host}:{port}{keyed}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0
