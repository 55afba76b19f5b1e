"""The in-sandbox agent: the init process of every sandbox, serving ``docs/agent-protocol.md``.

The modules next to this file are the agent. They are not imported by the daemon: the runtime
builds them into one bytecode file (``corral.runtime.inject.compile_agent``), bind-mounts it
read-only into each sandbox as ``/.corral/agent/agent.py`` and runs it on the host's interpreter
as ``python -I -S agent.py``; inside, they are the package ``agent``. The daemon talks to the
agent through ``corral.runtime.agent_client``.

    agent.py      runs the agent from the source tree (``AGENT_PATH``; the unit tests use it)
    main.py       configuration from the environment, PID 1 duties, start
    keys.py       its key: handed over on stdin, checked on every request, replaced by rekey
    http.py       its own small HTTP/1.1 server: requests, bodies, responses, the accept loop
    routes.py     the protocol's routes onto processes and files; event streams
    processes.py  the process table: spawning, the reaper, pipe readers, timeouts, signals
    process.py    one process: its event log, followers and exit
    spawn.py      starting a child (posix_spawn, else subprocess; PTY children by fork)
    disk_root.py  the root moved onto the sandbox's sized disk at start; CAP_SYS_ADMIN dropped
    cpus.py       the CPU count its processes see (affinity, /sys/.../cpu/online), set at start
    files.py      paths, file operations, streamed downloads and uploads
    jsonio.py     JSON by json's C accelerator
    errors.py     ApiError and errno translation

Rules for every agent module: the standard library only and each other (relative imports), never
this file (the build carries an empty ``__init__`` instead) nor anything else of corral. Imports
cost milliseconds each inside gVisor (every module file and every extension's pages come through
the sandbox's file system) and the agent's start is on the critical path of every sandbox
creation, so a module imports at its top only what the first requests need; the rest
(subprocess, pwd, shutil, signal names, traceback, heapq, bisect, weakref, json) is imported where
it is first used. Nothing depends on wall time surviving a checkpoint/restore except reported
timestamps; the listening socket stays open across it.

This file only tells the daemon where the agent is and which port it listens on; it must import
nothing else of corral.
"""

from pathlib import Path

__all__ = ["AGENT_DIR", "AGENT_PATH", "AGENT_PORT"]

AGENT_DIR = Path(__file__).parent
AGENT_PATH = AGENT_DIR / "agent.py"
AGENT_PORT = 49983
