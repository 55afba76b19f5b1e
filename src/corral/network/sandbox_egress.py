"""Per-sandbox egress state shared by the resolver and the proxy: policy, context, answers.

``ResolvedNames`` is the record the name rules rest on: which IPv4 addresses the sandbox's own
resolver answered to this sandbox for which name, and until when. The proxy lets a connection to
a name-allowed host through only to such an address.

Bounds: at most ``max_names`` names and ``max_addresses`` addresses per name are kept (the oldest
go first); an answer is remembered for its TTL clamped to [``min_ttl``, ``max_ttl``] seconds, so a
client that connects just after a zero-TTL answer still gets through.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from corral.network.egress import EgressContext
from corral.network.policy import EgressPolicy

__all__ = ["ResolvedNames", "SandboxEgress"]


class ResolvedNames:
    """name -> {address: expiry}; not thread-safe (used on the event loop only)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_names: int = 4096,
        max_addresses: int = 32,
        min_ttl: int = 30,
        max_ttl: int = 3600,
    ) -> None:
        self._clock = clock
        self._max_names = max_names
        self._max_addresses = max_addresses
        self._min_ttl = min_ttl
        self._max_ttl = max_ttl
        self._names: OrderedDict[str, dict[str, float]] = OrderedDict()
        self._by_address: dict[str, set[str]] = {}  # may hold stale names; checked on use

    def record(self, name: str, addresses: Iterable[str], ttl: int) -> None:
        expiry = self._clock() + min(max(ttl, self._min_ttl), self._max_ttl)
        for address in addresses:
            self._record_until(name, address, expiry)

    def _record_until(self, name: str, address: str, expiry: float) -> None:
        name = _normal(name)
        now = self._clock()
        entry = self._names.pop(name, {})
        entry = {addr: when for addr, when in entry.items() if when > now}
        entry.pop(address, None)
        entry[address] = expiry
        while len(entry) > self._max_addresses:
            entry.pop(next(iter(entry)))
        self._names[name] = entry
        while len(self._names) > self._max_names:
            self._names.popitem(last=False)
        self._by_address.setdefault(address, set()).add(name)
        if len(self._by_address) > 2 * self._max_names * self._max_addresses:
            self._by_address = {}  # rebuilt from what is kept
            for known, addresses in self._names.items():
                for addr in addresses:
                    self._by_address.setdefault(addr, set()).add(known)

    def names_for(self, address: str) -> set[str]:
        """The names the resolver answered ``address`` for, unexpired."""
        now = self._clock()
        candidates = self._by_address.get(address, set())
        found = {n for n in candidates if self._names.get(n, {}).get(address, 0.0) > now}
        if len(found) < len(candidates):
            self._by_address[address] = set(found)
        return found

    def addresses(self, name: str) -> set[str]:
        now = self._clock()
        return {addr for addr, when in self._names.get(_normal(name), {}).items() if when > now}

    def answered(self, name: str, address: str) -> bool:
        return address in self.addresses(name)

    def clear(self) -> None:
        self._names.clear()
        self._by_address.clear()

    def export(self) -> list[tuple[str, str, float]]:
        """(name, address, seconds left) of every unexpired answer: what a fork, a restored
        snapshot or a restarted daemon hands to the sandbox's next ``ResolvedNames`` (the
        sandbox's own caches outlive the daemon's memory of them)."""
        now = self._clock()
        return [
            (name, address, round(when - now, 3))
            for name, entry in self._names.items()
            for address, when in entry.items()
            if when > now
        ]

    def load(self, entries: Iterable[tuple[str, str, float]]) -> None:
        """Take answers from ``export`` (untrusted storage: each entry is checked)."""
        for name, address, left in entries:
            if not isinstance(name, str) or not isinstance(address, str):
                continue
            try:
                ipaddress.IPv4Address(address)
                seconds = float(left)
            except (ValueError, TypeError):
                continue
            if seconds > 0:
                self._record_until(name, address, self._clock() + min(seconds, self._max_ttl))


@dataclass
class SandboxEgress:
    """What the resolver and proxy know of one sandbox. ``slot_ns`` is its slot namespace, where
    both listen and from where the proxy connects out. ``policy`` changes live (``update``)."""

    sandbox_id: str
    slot_ns: str
    policy: EgressPolicy
    context: EgressContext
    names: ResolvedNames = field(default_factory=ResolvedNames)

    def update(self, policy: EgressPolicy, context: EgressContext | None = None) -> None:
        self.policy = policy
        if context is not None:
            self.context = context


def _normal(name: str) -> str:
    return name.rstrip(".").lower()
