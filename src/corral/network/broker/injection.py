"""What the broker knows of one sandbox's secrets: placeholders, values, where they may go.

An ``Injection`` is a secret as the broker uses it: the placeholder the sandbox holds, the value
that replaces it, the host patterns it is bound to and where in a request it may be replaced.
``SecretSource`` is what the service implements: the injections of a sandbox (read on every
intercepted request, so a rotation or a revocation applies to the next request) and the audit
sink.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Injection", "SecretSource", "host_matches"]


def host_matches(pattern: str, name: str) -> bool:
    """``api.example.com`` matches itself; ``*.example.com`` matches names below it only."""
    name = name.rstrip(".").lower()
    if pattern.startswith("*."):
        return name.endswith(pattern[1:]) and len(name) > len(pattern) - 1
    return name == pattern


@dataclass(frozen=True)
class Injection:
    """One secret of one sandbox. ``header``: the only header (lowercase) it may be replaced
    in, or None for any header (``Basic`` credentials are decoded and re-encoded); ``scheme``:
    with ``header``, the value must start with this scheme; ``query``/``body``: whether the
    query string / the body may carry it. AWS secrets (``aws_key_id`` set) are not replaced but
    re-signed: ``placeholder`` is then the access key id the sandbox signs with, ``value`` the
    real secret access key and ``aws_key_id`` the real access key id."""

    secret: str
    placeholder: bytes
    value: bytes
    hosts: tuple[str, ...]
    header: str | None = None
    scheme: str | None = None
    query: bool = True
    body: bool = False
    aws_key_id: bytes | None = None

    def covers(self, host: str) -> bool:
        return any(host_matches(pattern, host) for pattern in self.hosts)


class SecretSource(Protocol):
    def injections(self, sandbox_id: str) -> tuple[Injection, ...]:
        """The sandbox's secrets now (empty when it has none)."""
        ...

    def used(self, sandbox_id: str, secret: str, host: str, method: str, path: str) -> None:
        """Record one injection (called on the event loop; must not block)."""
        ...
