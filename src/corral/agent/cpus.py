"""The CPU count the sandbox's processes see: ``CORRAL_AGENT_CPUS``, set once at start.

gVisor gives its sentry as many Go Ps (GOMAXPROCS) as the sandbox has CPUs, and with one a packet
reaching a sandbox idle for 50 ms is answered 10-20 ms late (``bench/idle_wakeup.py``); so the
runtime never gives a sandbox fewer than 2 CPUs, and the agent shows its processes the count the
user asked for (ceil of its vCPUs) instead:

- its affinity, which every process it starts inherits, is narrowed to that many of its CPUs
  (``nproc``, ``sched_getaffinity``, ``os.process_cpu_count()``);
- while it still holds CAP_SYS_ADMIN (the sized root, ``disk_root.py``), a read-only file listing
  them is bound over ``/sys/devices/system/cpu/online``, which glibc's ``get_nprocs`` reads
  (``os.cpu_count()``, ``sysconf(_SC_NPROCESSORS_ONLN)``, ``getconf``).

This is presentation only: the host's cpu quota is what bounds the sandbox's CPU time, and a
process may widen its own affinity again. Any failure leaves the count gVisor shows (logged);
it never stops the agent. A checkpoint carries both (affinity and mount) like any other state.
"""

from __future__ import annotations

import os
import sys

from .fields import ENV_PREFIX

__all__ = ["CPU_ONLINE", "cpu_list", "present_cpus"]

CPU_ONLINE = "/sys/devices/system/cpu/online"
_MS_RDONLY = 0x1
_MS_REMOUNT = 0x20
_MS_BIND = 0x1000
_MNT_DETACH = 0x2


def cpu_list(cpus: list[int]) -> str:
    """The kernel's list format of ``cpus``: ``0``, ``0-3``, ``0,2-3``."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def present_cpus(env: dict[str, str], *, bind_sysfs: bool) -> list[int] | None:
    """Narrow this process to ``CORRAL_AGENT_CPUS`` of its CPUs (and, with ``bind_sysfs``, show
    only those as online). Returns the CPUs kept, or None when nothing was changed."""
    try:
        count = int(env.get(ENV_PREFIX + "CPUS", ""))
    except ValueError:
        return None
    have = sorted(os.sched_getaffinity(0))
    if count < 1 or count >= len(have):
        return None
    keep = have[:count]
    try:
        os.sched_setaffinity(0, keep)
        if bind_sysfs:
            _bind_online(cpu_list(keep))
    except Exception as exc:  # presentation only: the agent serves regardless
        print(f"corral agent: the CPU count stays gVisor's: {exc}", file=sys.stderr, flush=True)
    return keep


def _bind_online(listed: str) -> None:
    """Bind a read-only file holding ``listed`` over ``CPU_ONLINE``; it lives on a private tmpfs
    that is detached at once, so nothing else shows it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [*[ctypes.c_char_p] * 3, ctypes.c_ulong, ctypes.c_char_p]

    def check(result: int, what: str) -> None:
        if result != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    scratch = f"/tmp/.corral-cpus-{os.getpid()}"  # at start: nothing else runs yet
    os.mkdir(scratch, 0o700)
    try:
        check(libc.mount(b"tmpfs", scratch.encode(), b"tmpfs", 0, b"size=4k"), "mounting")
        try:
            source = f"{scratch}/online"
            with open(source, "w") as fh:
                fh.write(listed + "\n")
            target = CPU_ONLINE.encode()
            check(libc.mount(source.encode(), target, None, _MS_BIND, None), "binding")
            flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY
            check(libc.mount(None, target, None, flags, None), "remounting read-only")
        finally:
            libc.umount2(scratch.encode(), _MNT_DETACH)
    finally:
        os.rmdir(scratch)
