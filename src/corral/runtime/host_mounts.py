"""The runtime's host mounts made by system call rather than by the mount(8) and umount(8)
programs: a sandbox disk's loop device and ext4 mount, the console tmpfs, and their unmounts.

Why: every boot made two mounts and every teardown two unmounts, each a process that (through
libmount) also reads the whole of ``/proc/self/mountinfo``, which grows by two entries per
running sandbox: measured 11.5 ms for ``mount -o loop`` against 0.9 ms for the same loop set-up
and mount made here (load 6).

A loop device is taken as losetup(8) takes one: ``LOOP_CTL_GET_FREE``, then ``LOOP_CONFIGURE``
(Linux 5.8) with ``LO_FLAGS_AUTOCLEAR``, so the kernel frees it when the file system on it is
unmounted (as ``mount -o loop`` does) and there is no device to track. Another process may take
the same free device first: that one is then busy and the next free one is tried. A kernel
without ``LOOP_CONFIGURE`` gets the mount(8) program instead.

Blocking (a mount reads the disk, an unmount flushes it): callers run these in a thread.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
import subprocess
from pathlib import Path

from .host_commands import stderr_tail

__all__ = ["MountFailure", "mount_loop_ext4", "mount_tmpfs", "unmount"]

MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_NOATIME = 0x400
MNT_DETACH = 0x2
_LOOP_CTL_GET_FREE = 0x4C82
_LOOP_CONFIGURE = 0x4C0A
_LOOP_CLR_FD = 0x4C01
_LO_FLAGS_AUTOCLEAR = 4
_LO_NAME_SIZE = 64
# struct loop_info64: five __u64 (device, inode, rdevice, offset, sizelimit), four __u32 (number,
# encrypt_type, encrypt_key_size, flags), file_name[64], crypt_name[64], encrypt_key[32],
# __u64 init[2]; struct loop_config: __u32 fd, __u32 block_size, the info, __u64 reserved[8].
_INFO = struct.Struct("=5Q4I64s64s32s2Q")
_CONFIG = struct.Struct(f"=II{_INFO.size}s64x")
_ATTEMPTS = 32

_libc: ctypes.CDLL | None = None


class MountFailure(OSError):
    """A mount or unmount failed; the message names the target and the kernel's answer."""


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [*[ctypes.c_char_p] * 3, ctypes.c_ulong, ctypes.c_char_p]
        libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        _libc = libc
    return _libc


def _mount(source: str, target: Path, fstype: str, flags: int, data: str | None) -> None:
    encoded = None if data is None else data.encode()
    if _lib().mount(source.encode(), os.fsencode(target), fstype.encode(), flags, encoded) != 0:
        code = ctypes.get_errno()
        raise MountFailure(code, f"mounting {fstype} on {target}: {os.strerror(code)}")


def mount_tmpfs(target: Path, *, name: str, flags: int, options: str) -> None:
    """Mount a tmpfs called ``name`` on ``target`` with mount ``flags`` and ``options``."""
    _mount(name, target, "tmpfs", flags, options)


def mount_loop_ext4(image: Path, target: Path, *, flags: int = MS_NOATIME) -> None:
    """Attach ``image`` to a free loop device (freed by the kernel at unmount) and mount its
    ext4 file system on ``target``; nothing is left attached on failure."""
    try:
        control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        raise MountFailure(exc.errno, f"mounting {image} on {target}: {exc}") from exc
    try:
        backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
        try:
            device = _attach(control, backing, image)
        finally:
            os.close(backing)
    finally:
        os.close(control)
    if device is None:  # no LOOP_CONFIGURE on this kernel
        argv = ["mount", "-o", "loop,noatime", str(image), str(target)]
        done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
        if done.returncode != 0:
            detail = stderr_tail(done.stderr)
            raise MountFailure(errno.EIO, f"mounting {image} on {target}: {detail}")
        return
    path, fd = device
    try:
        _mount(path, target, "ext4", flags, None)
    except MountFailure:
        fcntl.ioctl(fd, _LOOP_CLR_FD)
        raise
    finally:
        os.close(fd)


def _attach(control: int, backing: int, image: Path) -> tuple[str, int] | None:
    """A loop device configured on ``backing`` (its path and an open descriptor), or None when
    the kernel has no LOOP_CONFIGURE."""
    name = os.fsencode(image)[-(_LO_NAME_SIZE - 1) :]
    info = _INFO.pack(0, 0, 0, 0, 0, 0, 0, 0, _LO_FLAGS_AUTOCLEAR, name, b"", b"", 0, 0)
    config = _CONFIG.pack(backing, 0, info)
    for _ in range(_ATTEMPTS):
        number = fcntl.ioctl(control, _LOOP_CTL_GET_FREE)
        path = f"/dev/loop{number}"
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, _LOOP_CONFIGURE, config)
        except OSError as exc:
            os.close(fd)
            if exc.errno == errno.EBUSY:  # another process took it first
                continue
            if exc.errno in (errno.ENOTTY, errno.EINVAL):
                return None
            raise MountFailure(exc.errno, f"attaching {image} to {path}: {exc}") from exc
        return path, fd
    raise MountFailure(errno.EBUSY, f"attaching {image}: every free loop device was taken")


def unmount(target: Path) -> None:
    """Unmount ``target``, lazily if it is busy."""
    libc = _lib()
    encoded = os.fsencode(target)
    if libc.umount2(encoded, 0) == 0:
        return
    code = ctypes.get_errno()
    if code == errno.EBUSY and libc.umount2(encoded, MNT_DETACH) == 0:
        return
    code = ctypes.get_errno() if code == errno.EBUSY else code
    raise MountFailure(code, f"unmounting {target}: {os.strerror(code)}")
