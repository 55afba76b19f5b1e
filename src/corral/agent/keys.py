"""The agent's key: read once from stdin at start, checked on every request, replaced by rekey.

Every request but an anonymous ``GET /health`` carries ``Authorization: Bearer <key>``, where the
key is 32 random bytes in hex that the daemon made for this agent. The daemon hands it over on
the one channel only the agent holds: the agent's stdin is a pipe the daemon wrote the key into
and closed before the sandbox started. ``read_boot_key`` reads it and puts /dev/null on fd 0, so
no child inherits the pipe; the key is never in the environment, the command line, a file in the
sandbox or the OCI config, so a process inside the sandbox cannot find it in ``/proc/1/*``, and
one that is not root cannot read the agent's memory either.

A restored sandbox (wake, fork, a warm template, a memory snapshot) continues with the memory of
the agent that was checkpointed, key included: the daemon's first call is ``POST /rekey`` with the
old key, which gives this agent a key (and a boot id) of its own.

Keys are compared with ``_operator._compare_digest``, the constant-time comparison that
``hmac.compare_digest`` is when OpenSSL is absent (importing ``hmac`` would load OpenSSL's
bindings, milliseconds inside gVisor, on the critical path of every sandbox start).
"""

from __future__ import annotations

import os
from _operator import _compare_digest

KEY_HEX_LENGTH = 64
_MAX_HANDOVER = 4096
_HEX = frozenset("0123456789abcdef")


def valid_key(value: object) -> bool:
    return isinstance(value, str) and len(value) == KEY_HEX_LENGTH and set(value) <= _HEX


def read_boot_key(fd: int = 0) -> str | None:
    """The key the daemon wrote on ``fd`` (one line of hex), then /dev/null on ``fd``.

    None when ``fd`` held no valid key (closed, empty, a terminal that gave something else): the
    agent then answers nothing but an anonymous health check, so an agent started without a key
    can never be driven.
    """
    data = b""
    try:
        while len(data) < _MAX_HANDOVER and b"\n" not in data:
            chunk = os.read(fd, _MAX_HANDOVER - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        data = b""
    try:
        null = os.open("/dev/null", os.O_RDONLY)
        if null != fd:
            os.dup2(null, fd, inheritable=False)
            os.close(null)
    except OSError:
        pass
    key = data.split(b"\n", 1)[0].strip().decode("ascii", "replace")
    return key if valid_key(key) else None


def authorized(header: str | None, key: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``key`` (never true without a key)."""
    if key is None or header is None:
        return False
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return _compare_digest(given.strip().encode("ascii", "replace"), key.encode())
