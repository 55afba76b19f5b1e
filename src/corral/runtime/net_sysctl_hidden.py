"""Starting runsc with the host's ``/proc/sys/net`` hidden, by system call (no wrapper programs).

runsc 20240729 refuses ``--network=sandbox`` when, inside the sandbox's network namespace,
``/proc/sys/net/core/rmem_default`` exists (its test for "the root namespace", gVisor issue
10704); on this kernel that file exists in every namespace. So a networked run or restore needs
a mount namespace of its own with a tmpfs over ``/proc/sys/net``. That used to be three programs
before runsc (``unshare --mount --propagation private sh -c 'mount -t tmpfs none /proc/sys/net
&& exec runsc ...'``), ~7 ms at no load and ~20 ms under load on every boot.

Here a fresh thread does the same with three system calls (~0.2 ms): ``unshare(CLONE_NEWNS)``
(which gives the thread a mount namespace and file-system attributes of its own; nothing else of
the process changes), every mount made private (so nothing mounted here reaches the host's
namespace, as ``--propagation private``), the tmpfs; then it starts runsc, which inherits the
thread's namespace, and ends. No thread that outlives this call, least of all the event loop's,
is ever left in another mount namespace. The program is then awaited through a pidfd.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import subprocess
import threading
from collections.abc import Mapping

from .host_commands import CommandError

__all__ = ["run_with_net_sysctl_hidden"]

_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_NET_SYSCTL = b"/proc/sys/net"

_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [*[ctypes.c_char_p] * 3, ctypes.c_ulong, ctypes.c_char_p]
        libc.unshare.argtypes = [ctypes.c_int]
        _libc = libc
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _hide_net_sysctl() -> None:
    """Move the calling thread into a private mount namespace with a tmpfs over /proc/sys/net."""
    libc = _lib()
    _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "making mounts private")
    _check(libc.mount(b"none", _NET_SYSCTL, b"tmpfs", 0, None), "mounting tmpfs on /proc/sys/net")


def _spawn(
    argv: list[str],
    stdin: int,
    stdout: int,
    stderr: int,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` from a fresh thread that has hidden /proc/sys/net; the thread then ends."""
    outcome: list[subprocess.Popen[bytes] | BaseException] = []

    def run() -> None:
        try:
            _hide_net_sysctl()
            outcome.append(
                subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=stderr, env=env)
            )
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, name="corral-runsc-spawn", daemon=True)
    thread.start()
    thread.join()
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


async def run_with_net_sysctl_hidden(
    argv: list[str],
    *,
    stdin: int,
    stdout: int,
    stderr: int,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> None:
    """Run ``argv`` in a mount namespace of its own whose /proc/sys/net is an empty tmpfs;
    raise ``CommandError`` if it cannot start, fails or outlives ``timeout`` (then it is killed:
    only the process started here)."""
    try:
        proc = _spawn(argv, stdin, stdout, stderr, env)
    except OSError as exc:
        raise CommandError(argv, f"cannot run {argv[0]}: {exc}") from exc
    try:
        await asyncio.wait_for(_exited(proc), timeout)
    except TimeoutError:
        _kill(proc)
        raise CommandError(argv, f"{argv[0]} timed out after {timeout:g} s") from None
    except asyncio.CancelledError:
        _kill(proc)
        raise
    if proc.returncode != 0:
        raise CommandError(argv, f"exit status {proc.returncode}", proc.returncode)


async def _exited(proc: subprocess.Popen[bytes]) -> None:
    """Wait for ``proc`` to exit without blocking the loop (its pidfd turns readable), reap it."""
    loop = asyncio.get_running_loop()
    pidfd = os.pidfd_open(proc.pid)
    try:
        done: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not done.done():
                done.set_result(None)

        loop.add_reader(pidfd, readable)
        try:
            await done
        finally:
            loop.remove_reader(pidfd)
    finally:
        os.close(pidfd)
    proc.wait()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()
