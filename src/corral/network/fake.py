"""An in-memory ``Network`` for unit tests: the real one's bookkeeping, no kernel.

It follows ``SlotNetwork``'s rules: ``lease()`` hands out the lowest index that is neither leased
nor present "on the host" (``existing``: slots a previous daemon left, e.g. of running sandboxes),
``lease(index)`` adopts such a slot, ``release`` removes the slot, ``close`` refuses further leases,
``reap_stale`` removes what is present but neither kept nor leased. Tests can look at ``leased``,
``existing`` and ``prepared``, make the next call of an operation fail with ``fail_next``, and
make a slot's sandbox send or receive with ``add_traffic`` (its counts start at zero at ``lease``
and go with ``release``, as on the kernel).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import Counter

from corral.network.base import NetworkFailure, NoFreeSlot, Slot, Traffic

__all__ = ["FakeNetwork"]


class FakeNetwork:
    """Implements ``corral.network.base.Network`` in memory; safe for concurrent use (one lock)."""

    def __init__(
        self,
        capacity: int = 16,
        *,
        prefix: str = "corral",
        subnet: str = "10.200.0.0/16",
        existing: set[int] | None = None,
    ) -> None:
        self.capacity = capacity
        self.prefix = prefix
        self._subnet = ipaddress.IPv4Network(subnet)
        self.existing: set[int] = set(existing or ())
        self.leased: dict[int, Slot] = {}
        self.prepared: Counter[int] = Counter()
        self.counted: dict[int, Traffic] = {}
        self.closed = False
        self.built_ahead = 0  # what build_ahead was asked for, in total
        self._failures: dict[str, NetworkFailure] = {}
        self._lock = asyncio.Lock()

    def fail_next(self, operation: str, error: NetworkFailure | None = None) -> None:
        """Make the next call of ``operation`` (``"lease"``, ``"prepare"``, ``"release"``,
        ``"close"``, ``"reap_stale"``, ``"traffic"``) raise ``error`` (a generic
        ``NetworkFailure`` by default)."""
        self._failures[operation] = error or NetworkFailure(f"{operation} failed (injected)")

    async def lease(self, index: int | None = None, *, refill: bool = True) -> Slot:
        async with self._lock:
            self._maybe_fail("lease")
            if self.closed:
                raise NetworkFailure(f"network {self.prefix!r} is closed")
            if index is None:
                index = self._pick_free_index()
            elif not 0 <= index < self.capacity:
                raise NetworkFailure(f"slot {index} is outside 0..{self.capacity - 1}")
            elif index in self.leased:
                raise NetworkFailure(f"slot {index} is already leased")
            slot = self._slot(index)
            if index not in self.existing:  # a new slot counts from zero; an adopted one goes on
                self.counted[index] = Traffic()
            self.existing.add(index)
            self.leased[index] = slot
            return slot

    async def prepare(self, slot: Slot) -> None:
        async with self._lock:
            self._maybe_fail("prepare")
            self._check_leased(slot)
            self.prepared[slot.index] += 1

    def build_ahead(self, count: int) -> None:
        self.built_ahead += count

    def refill(self) -> None:
        pass  # nothing is built ahead

    def add_traffic(self, slot: Slot, traffic: Traffic) -> None:
        """The sandbox in ``slot`` moved ``traffic`` (added to the slot's counts)."""
        self.counted[slot.index] = self.counted.get(slot.index, Traffic()) + traffic

    async def traffic(self, slot: Slot) -> Traffic | None:
        async with self._lock:
            self._maybe_fail("traffic")
            self._check_leased(slot)
            return self.counted.get(slot.index, Traffic())

    async def release(self, slot: Slot) -> None:
        async with self._lock:
            self._maybe_fail("release")
            self._check_leased(slot)
            del self.leased[slot.index]
            self.counted.pop(slot.index, None)
            self.existing.discard(slot.index)
            self.prepared.pop(slot.index, None)

    async def close(self) -> None:
        async with self._lock:
            self._maybe_fail("close")
            self.closed = True

    async def reap_stale(self, keep: set[int]) -> list[int]:
        async with self._lock:
            self._maybe_fail("reap_stale")
            stale = sorted(self.existing - set(keep) - set(self.leased))
            self.existing.difference_update(stale)
            for index in stale:
                self.counted.pop(index, None)
            return stale

    def _pick_free_index(self) -> int:
        for index in range(self.capacity):
            if index not in self.leased and index not in self.existing:
                return index
        raise NoFreeSlot(f"all {self.capacity} slots of {self.prefix!r} are in use")

    def _slot(self, index: int) -> Slot:
        name = f"{self.prefix}-sbx-{index}"
        return Slot(
            index=index,
            netns_name=name,
            netns_path=f"/run/netns/{name}",
            host_address=str(self._subnet.network_address + 4 * index + 2),
        )

    def _check_leased(self, slot: Slot) -> None:
        if self.leased.get(slot.index) != slot:
            raise NetworkFailure(f"slot {slot.index} is not leased")

    def _maybe_fail(self, operation: str) -> None:
        error = self._failures.pop(operation, None)
        if error is not None:
            raise error
