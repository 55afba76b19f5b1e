"""The sandbox's root on its own disk, entered once at start, and CAP_SYS_ADMIN dropped for good.

gVisor (runsc 20240729) backs the root's copy-on-write layer with a file on the sandbox's ext4
disk, but that layer is a tmpfs without a size: ``df /`` says 8.0E and 0 used. So the runtime
also mounts, at the path in ``CORRAL_AGENT_DISK_ROOT``, a tmpfs of the sandbox's disk size whose
pages live in a file on that same disk (a gVisor mount hint; see ``runtime/bundle.py``). At start
the agent lays an overlay over the image's root with that tmpfs as its upper layer, carries the
other mounts (``/proc``, ``/dev``..., its own read-only files) into it, and pivots into it. From
then on every write in the sandbox (``/tmp`` included) lands in the sized tmpfs: ``df /`` shows
the disk's size and use, a write past it fails with ENOSPC, and a checkpoint (park, fork,
snapshot) carries the layer like any other gVisor file system.

Only this needs CAP_SYS_ADMIN, which the runtime grants the agent for it alone:
``drop_sys_admin`` removes it from the bounding, permitted, effective and inheritable sets before
the agent starts anything, so no process of the sandbox can ever regain it. Failing to drop it
ends the agent (the sandbox fails to start): it never serves with the capability held.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not imported at run time (the agent starts lean)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["CAP_SYS_ADMIN", "DiskRootError", "drop_sys_admin", "enter_disk_root", "has_sys_admin"]

CAP_SYS_ADMIN = 21
_MS_RDONLY = 0x1
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_REMOUNT = 0x20
_MS_BIND = 0x1000
_MNT_DETACH = 0x2
_PR_CAPBSET_DROP = 24
_SYS_PIVOT_ROOT = 155
_SYS_CAPGET = 125
_SYS_CAPSET = 126
_CAP_V3 = 0x20080522
_FLAGS = {"ro": _MS_RDONLY, "nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC}


class DiskRootError(Exception):
    """Entering the disk root or dropping the capability failed (the message says which step)."""


def _libc() -> tuple[Any, Any]:  # (ctypes, libc): ctypes is loaded only when needed
    import ctypes  # ~10 ms inside gVisor: only sandboxes that need it pay

    return ctypes, ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes

        errno = ctypes.get_errno()
        raise DiskRootError(f"{what}: {os.strerror(errno)} (errno {errno})")


def has_sys_admin() -> bool:
    """Whether CAP_SYS_ADMIN is still in this process's bounding set."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("CapBnd:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    return False


def _mounts_to_carry(disk: str) -> list[tuple[str, int]]:
    """The mount points to bind into the new root, parents first, with their flags: all but
    ``/``, the disk itself and ``/tmp`` (the new root's own /tmp is on the disk)."""
    carried = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            point, options = fields[4], fields[5].split(",")
            if point in ("/", "/tmp") or point == disk or point.startswith(disk + "/"):
                continue
            flags = 0
            for option in options:
                flags |= _FLAGS.get(option, 0)
            carried.append((point, flags))
    return carried


def enter_disk_root(disk: str) -> None:
    """Overlay the root with the sized tmpfs mounted at ``disk`` as its upper layer and pivot into
    it. Raises DiskRootError naming the step that failed (the old root is left as it was)."""
    ctypes, libc = _libc()
    libc.mount.argtypes = [*[ctypes.c_char_p] * 3, ctypes.c_ulong, ctypes.c_char_p]
    upper, work, new = f"{disk}/upper", f"{disk}/work", f"{disk}/root"
    for directory in (upper, work, new):
        os.mkdir(directory, 0o755)
    options = f"lowerdir=/,upperdir={upper},workdir={work}".encode()
    _check(libc.mount(b"overlay", new.encode(), b"overlay", 0, options), "mounting the overlay")
    for point, flags in _mounts_to_carry(disk):
        target = (new + point).encode()
        _check(libc.mount(point.encode(), target, None, _MS_BIND, None), f"binding {point}")
        if flags:
            remount = _MS_BIND | _MS_REMOUNT | flags
            _check(libc.mount(None, target, None, remount, None), f"remounting {point}")
    # The old root goes to the disk's own (empty, hidden) mount point in the new root.
    put_old = f"{new}{disk}"
    _check(libc.syscall(_SYS_PIVOT_ROOT, new.encode(), put_old.encode()), "pivoting")
    os.chdir("/")
    _check(libc.umount2(disk.encode(), _MNT_DETACH), "detaching the old root")
    if not os.path.isdir("/tmp"):
        os.mkdir("/tmp")
    os.chmod("/tmp", 0o1777)


def drop_sys_admin() -> None:
    """Remove CAP_SYS_ADMIN from every capability set of this process, for it and its children."""
    ctypes, libc = _libc()
    _check(libc.prctl(_PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0), "dropping CAP_SYS_ADMIN")
    header = (ctypes.c_uint32 * 2)(_CAP_V3, 0)
    data = (ctypes.c_uint32 * 6)()  # {effective, permitted, inheritable} x 2 words
    _check(libc.syscall(_SYS_CAPGET, header, data), "reading capabilities")
    keep = ~(1 << CAP_SYS_ADMIN) & 0xFFFFFFFF
    for i in (0, 1, 2):
        data[i] &= keep
    _check(libc.syscall(_SYS_CAPSET, header, data), "dropping CAP_SYS_ADMIN")
    if has_sys_admin():
        raise DiskRootError("CAP_SYS_ADMIN is still in the bounding set after dropping it")
