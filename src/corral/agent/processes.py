"""The process table (``Agent``): spawning, the reaper, pipe readers, timeouts and signals.

Threads:
- reaper: the only caller of ``waitpid`` in the agent. As PID 1 (or a child subreaper when run
  elsewhere) every orphan in the sandbox becomes our child, so it waits for ``-1`` and matches the
  pid against the process table; unknown pids are orphans and are simply reaped;
- pipe readers: one per open output pipe, taken from a pool of reused threads (``PumpPool``,
  in ``workers.py`` with ``Deadlines``; a request's fields are read by ``fields.py``),
  started on demand (none ahead: the agent's start is on the critical path of every sandbox
  creation);
- deadlines: one thread, started with the first timeout, that kills the process groups whose
  timeout ran out (``Deadlines``).

Locking: ``Agent.lock`` guards the process table and is held across the spawn so the reaper, which
looks a reaped pid up under the same lock, matches a child that exits before it was registered.
Each ``Process.cond`` guards that process's event log, its followers' cursors and its exit state.
Lock order: ``Agent.lock`` before ``Process.cond``; ``Process.stdin_lock`` is never taken while
holding either.
"""

from __future__ import annotations

import _signal
import os
import threading
import time

from .errors import ApiError, bad_request
from .fields import (
    clean_env,
    default_shell,
    json_size,
    parse_winsize,
    run_as,
    str_dict,
)
from .files import resolve_path
from .oom import MIB, OomKiller
from .process import Process
from .spawn import popen_child, pty_child, set_window_size, spawn_child
from .workers import Deadlines, PumpPool

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ORPHAN_POLL = 1.0  # with no child of ours alive, how often to look for re-parented orphans
# Bounds of the process table (each process also keeps at most process.RETAIN_BYTES of output).
# A full table first forgets its oldest finished, unfollowed processes; with none to forget a
# start is refused (413 too_large). The whole process list stays well below what the daemon
# reads of one answer (16 MiB, runtime/agent_client.py).
MAX_PROCESSES = 1024  # processes tracked at once, running or finished and not yet forgotten
MAX_TAG_BYTES = 4096  # a process's tag, as JSON
MAX_CMD_BYTES = 256 * 1024  # a process's argv (or shell string), as JSON
MAX_TABLE_BYTES = 8 * 1024 * 1024  # tags and argvs of all tracked processes together, as JSON
# A process started with "restart": true (a template's supervised start command) is started
# again whenever it exits, unless it was stopped by a signal sent through the API: after
# RESTART_DELAY seconds, doubling up to RESTART_DELAY_MAX while it keeps exiting within
# RESTART_STABLE seconds of its start.
RESTART_DELAY = 0.5
RESTART_DELAY_MAX = 30.0
RESTART_STABLE = 10.0


def _close_stdin(proc: Process) -> None:
    with proc.stdin_lock:
        if proc.child.stdin is not None:
            proc.child.stdin.close()


class Agent:
    """The process table, the default environment and the reaper.

    ``lock`` guards ``processes``, ``table_bytes``, ``spawn_generation`` and ``default_env`` and
    is held across ``Popen`` (see the module docstring); ``reaper_wakeup`` is a condition on the
    same lock. Invariant: ``table_bytes`` is the sum of ``Process.cost`` over ``processes``, at
    most ``MAX_TABLE_BYTES``, and ``len(processes) <= MAX_PROCESSES``.
    """

    def __init__(self, env: dict[str, str], key: str | None = None) -> None:
        self.boot_id = os.urandom(16).hex()
        self.key = key  # see keys.py; None: nothing but an anonymous health check is answered
        self.cwd = os.getcwd()  # children started here need no chdir (see spawn_child)
        self.lock = threading.Lock()
        self.reaper_wakeup = threading.Condition(self.lock)
        self.spawn_generation = 0
        self.processes: dict[int, Process] = {}
        self.table_bytes = 0
        self.default_env = clean_env(env)
        self.pumps = PumpPool()
        self.deadlines = Deadlines()
        self.oom = OomKiller(self._on_oom_kill)
        self._watches: Any = None  # watch.Watches, made (and its module loaded) at first use

    def watches(self) -> Any:
        """The directory watches (``watch.Watches``)."""
        with self.lock:
            if self._watches is None:
                from .watch import Watches

                self._watches = Watches()
            return self._watches

    def start(self) -> None:
        """Start the reaper and (inside a sandbox) the OOM killer; pipe readers and the
        deadline thread start when first needed."""
        threading.Thread(target=self._reap_forever, name="reaper", daemon=True).start()
        self.oom.start()

    def _on_oom_kill(self, chain: list[int], resident: int, name: str, total: int) -> None:
        """Say why: on the agent's log, and on the stderr of the process it started that the
        victim is (or descends from), as a shell says "Killed"."""
        note = (
            f"corral: out of memory: killed process {chain[0]} ({name}) using "
            f"{resident // MIB} MiB; "
            f"the sandbox has {total // MIB} MiB (create it with more memory)\n"
        )
        import sys

        print(note, end="", file=sys.stderr, flush=True)
        with self.lock:
            started = [self.processes[p] for p in chain if p in self.processes]
        if started:
            started[0].add_note(b"stderr", note.encode())

    def _reap_forever(self) -> None:
        while True:
            with self.lock:
                generation = self.spawn_generation
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                with self.lock:
                    if self.spawn_generation == generation:
                        self.reaper_wakeup.wait(ORPHAN_POLL)
                continue
            with self.lock:
                proc = self.processes.get(pid)
            if proc is not None and not proc.reaped:
                proc.on_reaped(status)
                if proc.restart_spec is not None and not proc.stopped:
                    self._schedule_restart(proc)

    def _schedule_restart(self, proc: Process) -> None:
        ran = (proc.ended_at or time.time()) - proc.started_at
        delay = (
            RESTART_DELAY
            if ran >= RESTART_STABLE
            else min(proc.restart_delay * 2, RESTART_DELAY_MAX)
        )
        timer = threading.Timer(delay, self._restart, (proc, delay))
        timer.daemon = True
        timer.start()

    def _restart(self, proc: Process, delay: float) -> None:
        import sys

        assert proc.restart_spec is not None
        print(f"corral agent: restarting {proc.cmd[0]!r} (it exited)", file=sys.stderr, flush=True)
        try:
            new, _ = self.spawn(proc.restart_spec, follow=False)
        except ApiError as exc:  # e.g. its program is gone: try again later
            print(f"corral agent: cannot restart {proc.cmd[0]!r}: {exc}", file=sys.stderr)
            proc.restart_delay = delay
            proc.ended_at = time.time()
            self._schedule_restart(proc)
            return
        new.restart_delay = delay

    def set_env(self, env: dict[str, str], merge: bool = False) -> None:
        """Replace the default environment of new processes, or with ``merge`` add to it."""
        with self.lock:
            self.default_env = clean_env({**self.default_env, **env} if merge else env)

    def rekey(self, key: str, boot_id: str, seed: bytes) -> None:
        """Take a new key and boot id after a restore (keys.py), and reseed what the agent's
        memory copied from the checkpoint: Python's ``random`` if anything loaded it.
        (``os.urandom`` comes from the host's kernel through gVisor and differs in every copy.)"""
        self.key = key
        self.boot_id = boot_id
        import sys

        shared_random = sys.modules.get("random")
        if shared_random is not None:
            shared_random.seed(seed + os.urandom(32))

    def get(self, pid: int) -> Process:
        with self.lock:
            proc = self.processes.get(pid)
        if proc is None:
            raise ApiError(404, "not_found", f"no process with pid {pid}")
        return proc

    def all_processes(self) -> list[Process]:
        with self.lock:
            return sorted(self.processes.values(), key=lambda p: p.started_at)

    def forget(self, pid: int) -> None:
        with self.lock:
            proc = self.processes.get(pid)
            if proc is None:
                raise ApiError(404, "not_found", f"no process with pid {pid}")
            if proc.running:
                raise ApiError(409, "conflict", f"process {pid} is still running")
            self._remove(proc)
        _close_stdin(proc)

    def forget_delivered(self, proc: Process) -> None:
        """Drop ``proc`` after its stream delivered the exit event (``forget=true``), if it is
        still this table's entry for its pid; nothing to answer, so nothing is raised."""
        with self.lock:
            if proc.running:
                return
            self._remove(proc)
        _close_stdin(proc)

    def _remove(self, proc: Process) -> None:
        # Under self.lock.
        if self.processes.get(proc.pid) is proc:
            del self.processes[proc.pid]
            self.table_bytes -= proc.cost

    def _make_room(self, cost: int, program: str) -> list[Process]:
        """Under self.lock: forget the oldest finished processes nobody follows until one of
        ``cost`` fits in the table; refuse (413) when it cannot. Returns the forgotten ones."""
        forgotten: list[Process] = []
        while len(self.processes) >= MAX_PROCESSES or self.table_bytes + cost > MAX_TABLE_BYTES:
            victim = next((p for p in self.processes.values() if p.forgettable()), None)
            if victim is None:
                raise ApiError(
                    413,
                    "too_large",
                    f"cannot start {program!r}: the sandbox's agent already tracks "
                    f"{len(self.processes)} running or followed processes "
                    f"(at most {MAX_PROCESSES}, with {MAX_TABLE_BYTES // 1024} KiB of commands "
                    "and tags); wait for some to finish, or kill some",
                )
            self._remove(victim)
            forgotten.append(victim)
        return forgotten

    def spawn(self, spec: dict[str, Any], follow: bool) -> tuple[Process, int | None]:
        """Start a process described by a ``POST /processes`` body; attach a follower if asked."""
        cmd, shell = spec.get("cmd"), spec.get("shell")
        pty_spec = spec.get("pty")
        winsize = parse_winsize(pty_spec) if pty_spec is not None else None
        if winsize is not None and cmd is None and shell is None:
            cmd = default_shell()
        if (cmd is None) == (shell is None):
            raise bad_request("exactly one of 'cmd' and 'shell' is required")
        if shell is not None:
            if not isinstance(shell, str):
                raise bad_request("'shell' must be a string")
            argv = ["/bin/sh", "-c", shell]
        else:
            if not (isinstance(cmd, list) and cmd and all(isinstance(a, str) for a in cmd)):
                raise bad_request("'cmd' must be a non-empty list of strings")
            argv = list(cmd)
        tag = spec.get("tag")
        cost = json_size(argv if shell is None else shell, "'cmd'", MAX_CMD_BYTES)
        cost += json_size(tag, "'tag'", MAX_TAG_BYTES)
        extra_env = str_dict(spec.get("env"), "env")
        timeout = spec.get("timeout")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise bad_request("'timeout' must be a positive number of seconds or null")
        cwd_value = spec.get("cwd")
        cwd = resolve_path(cwd_value)[0] if cwd_value is not None else "/"
        program = argv[0]
        with self.lock:
            env = dict(self.default_env)
        user_args: dict[str, Any] = {}
        user = spec.get("user")
        if user is not None:
            user_args = run_as(user, program, env)
        env.update(extra_env)
        if winsize is not None:
            env.setdefault("TERM", "xterm-256color")
        with_stdin = bool(spec.get("stdin"))
        with self.lock:
            forgotten = self._make_room(cost, program)
            try:
                child = None
                if winsize is not None:
                    child = pty_child(argv, env, cwd, user_args, *winsize)
                elif user is None and cwd == self.cwd:
                    child = spawn_child(argv, env, with_stdin)
                if child is None:
                    child = popen_child(argv, env, with_stdin, cwd, user_args)
            except OSError as exc:
                if exc.filename == cwd and cwd != program:
                    doing = f"cannot start {program!r} in directory {cwd!r}"
                else:
                    doing = f"cannot execute {program!r}"
                raise ApiError(400, "exec_failed", f"{doing}: {exc.strerror or exc}") from None
            except ValueError as exc:
                raise ApiError(400, "exec_failed", f"cannot execute {program!r}: {exc}") from None
            proc = Process(child, argv, tag)
            proc.cost = cost
            if spec.get("restart"):
                proc.restart_spec = dict(spec)
            if winsize is not None:
                proc.winsize = winsize
                proc.open_pipes = 1
            twin = self.processes.get(proc.pid)  # a finished, unforgotten process of the same pid
            if twin is not None:
                self._remove(twin)
                forgotten.append(twin)
            self.processes[proc.pid] = proc
            self.table_bytes += cost
            fid = proc.attach(-1) if follow else None
            self.spawn_generation += 1
            self.reaper_wakeup.notify()
        for old in forgotten:
            _close_stdin(old)
        pipes = [(child.stdout, b"stdout")]
        if child.stderr is not None:
            pipes.append((child.stderr, b"stderr"))
        while pipes:
            pipe, kind = pipes[0]
            try:
                self.pumps.submit(proc, pipe, kind)
            except RuntimeError as exc:  # out of threads (pids limit): do not leave it unread
                proc.kill_group(_signal.SIGKILL)
                for unread, _ in pipes:
                    unread.close()
                    proc.pipe_closed()
                raise ApiError(
                    503, "internal", f"cannot follow the output of {program!r}: {exc}"
                ) from None
            pipes.pop(0)
        if timeout is not None:
            self.deadlines.add(float(timeout), proc)
        return proc, fid

    @staticmethod
    def resize(proc: Process, value: object) -> None:
        """Set the window size of a PTY process's terminal (``{"rows", "cols"}``)."""
        rows, cols = parse_winsize(value)
        if proc.winsize is None:
            raise ApiError(
                409, "conflict", f"process {proc.pid} has no terminal (not started with 'pty')"
            )
        with proc.stdin_lock:
            master = proc.child.stdin
            if master is None or master.closed or not proc.running:
                raise ApiError(409, "conflict", f"process {proc.pid} has already finished")
            try:
                set_window_size(master.fileno(), rows, cols)
            except OSError as exc:
                raise ApiError(
                    409,
                    "conflict",
                    f"cannot resize the terminal of process {proc.pid}: {exc.strerror}",
                ) from None
            proc.winsize = (rows, cols)
