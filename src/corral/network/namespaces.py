"""Network namespaces and netlink, used by the slots: create, enter, remove; links and addresses.

Entering a namespace changes the calling *thread*. So work that must run inside a namespace runs
in a fresh thread that enters it and then ends (``run_in_netns``, ``run_in_new_netns``): no thread
that outlives an operation, least of all the event loop's, is ever left in another namespace.
A namespace is made like ``ip netns add`` makes it: ``unshare`` in that fresh thread, then a bind
mount of the thread's namespace at ``/run/netns/NAME``, so ``ip netns`` sees it too.

The netlink helpers act in the calling thread's namespace and raise ``NetworkFailure`` with the
step that failed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from pyroute2 import IPRoute, netns
from pyroute2.netlink.exceptions import NetlinkError

from corral.network.base import NetworkFailure

NETNS_DIR = "/run/netns"
_CLONE_NEWNET = 0x40000000

T = TypeVar("T")

_netns_mount_lock = threading.Lock()  # the first namespace makes /run/netns a shared mount
_libc: ctypes.CDLL | None = None


# -- namespaces ----------------------------------------------------------------------------------


def netns_path(name: str) -> str:
    return f"{NETNS_DIR}/{name}"


def list_netns() -> set[str]:
    return set(netns.listnetns(NETNS_DIR))


def in_fresh_thread(work: Callable[[], T]) -> T:
    """Run ``work`` in a new thread and return its result or raise its exception."""
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as exc:
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name="corral-netns", daemon=True)
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    result: T = value
    return result


def enter_netns(fd: int) -> None:
    """Move the calling thread into the namespace ``fd`` refers to (throwaway threads only)."""
    netns.setns(fd)


def run_in_netns(name: str, work: Callable[[], T]) -> T:
    """Run ``work`` in a fresh thread that has entered namespace ``name``."""

    def entered() -> T:
        try:
            fd = os.open(netns_path(name), os.O_RDONLY)
        except FileNotFoundError as exc:
            raise NetworkFailure(f"namespace {name} is missing") from exc
        try:
            enter_netns(fd)
        finally:
            os.close(fd)
        return work()

    return in_fresh_thread(entered)


def run_in_new_netns(name: str, work: Callable[[], T]) -> T:
    """Create namespace ``name`` and run ``work`` in it (in a fresh thread)."""

    def created() -> T:
        libc = _load_libc()
        if libc.unshare(_CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise NetworkFailure(f"creating namespace {name}: unshare: {os.strerror(code)}")
        with _netns_mount_lock:
            try:
                netns.attach(name, "thread-self")
            except FileExistsError as exc:  # someone else's namespace: leave it alone
                raise NetworkFailure(f"creating namespace {name}: it exists") from exc
            except OSError as exc:
                remove_netns(name)
                raise NetworkFailure(f"creating namespace {name}: {describe(exc)}") from exc
        # No IPv6 inside slots: nothing uses it, and it would only add link-local chatter.
        for key in ("net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/default/disable_ipv6"):
            with contextlib.suppress(FileNotFoundError):
                write_sysctl(key, "1")
        return work()

    return in_fresh_thread(created)


def remove_netns(name: str) -> None:
    """Unbind the namespace; the kernel frees it (asynchronously) once nothing holds it."""
    with contextlib.suppress(FileNotFoundError):
        netns.remove(name)


def write_sysctl(key: str, value: str) -> None:
    # /proc/sys/net resolves against the calling thread's network namespace.
    with open(f"/proc/sys/{key}", "w") as sysctl:
        sysctl.write(value)


def _load_libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


# -- netlink -------------------------------------------------------------------------------------


def open_ipr(context: str) -> IPRoute:
    """An rtnetlink socket in the calling thread's namespace."""
    try:
        return IPRoute()
    except OSError as exc:
        raise NetworkFailure(f"{context}: opening netlink: {exc}") from exc


def step(what: str, action: Callable[[], T]) -> T:
    """Run one netlink action, naming it in the error."""
    try:
        return action()
    except (NetlinkError, OSError) as exc:
        raise NetworkFailure(f"{what}: {describe(exc)}") from exc


def link_index(ipr: Any, ifname: str) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise NetworkFailure(f"interface {ifname} is missing")
    return int(found[0])


def set_up(ipr: Any, ifname: str) -> None:
    step(f"setting {ifname} up", lambda: ipr.link("set", ifname=ifname, state="up"))


def add_veth(ipr: Any, ifname: str, peer: str, peer_netns_fd: int) -> None:
    """Create a veth pair: ``ifname`` up in this namespace, ``peer`` (down) in the other one."""
    spec = {"ifname": peer, "net_ns_fd": peer_netns_fd}
    step(
        f"creating veth {ifname}/{peer}",
        lambda: ipr.link("add", ifname=ifname, kind="veth", peer=spec, state="up"),
    )


def ensure_address(ipr: Any, ifname: str, address: str, prefixlen: int) -> int:
    """Give ``ifname`` the address unless it has it; return the link's index."""
    index = link_index(ipr, ifname)
    try:
        ipr.addr("add", index=index, address=address, prefixlen=prefixlen)
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            what = f"adding {address}/{prefixlen} to {ifname}"
            raise NetworkFailure(f"{what}: {describe(exc)}") from exc
    return index


def delete_links(ipr: Any, names: Iterable[str]) -> None:
    for name in names:
        for index in ipr.link_lookup(ifname=name):
            try:
                ipr.link("del", index=index)
            except NetlinkError as exc:
                if exc.code != errno.ENODEV:  # gone meanwhile, e.g. with its veth peer
                    raise NetworkFailure(f"deleting {name}: {describe(exc)}") from exc


def describe(exc: BaseException) -> str:
    if isinstance(exc, NetlinkError):
        return f"{os.strerror(exc.code)} (netlink error {exc.code})"
    return str(exc) or type(exc).__name__
