"""Network slots on the real kernel: the pool that leases, builds ahead, releases and reaps them.

Addressing is ``slot_plan.py``; the kernel plumbing of one slot is ``slot_kernel.py``.

Slot N of a network with prefix P and subnet S owns the N-th /30 of S (``A.1``, ``A.2``)::

    daemon ns                  ns P-slot-N                           ns P-sbx-N
    {tag}-Nh  A.1/30 <-veth-> to-host  A.2/30
                              to-sbx   169.254.0.22/30 <-veth->  eth0 169.254.0.21/30
                              nftables (firewall.SlotRules)      default via 169.254.0.22

The host reaches the sandbox at ``A.2`` (``Slot.host_address``); the slot namespace rewrites it to
the inner address, which is the same in every slot. Everything the network owns carries the
prefix: the namespace names, the host-side veth names (through a short ``tag``, as interface
names have at most 15 characters) and the ``inet`` table in the daemon's namespace
(``firewall.HostRules``). So tests and a running daemon never touch each other's slots.

Threads and namespaces: all netlink and nftables work runs outside the event loop (in
``asyncio.to_thread``). Work that must happen inside a slot or sandbox namespace runs in a fresh
thread that enters the namespace with ``setns`` and then ends, so no thread that outlives an
operation is ever in another namespace. New namespaces are made the same way (``unshare`` in a
fresh thread, then bind-mounted under ``/run/netns`` like ``ip netns add`` does).
"""

from __future__ import annotations

import asyncio
import logging
from typing import overload

from pyroute2.netlink.exceptions import NetlinkError

from corral.network import firewall
from corral.network.base import (
    NetworkFailure,
    NoFreeSlot,
    Slot,
    Traffic,
)
from corral.network.namespaces import (
    describe,
    list_netns,
    open_ipr,
    run_in_netns,
)
from corral.network.slot_kernel import configure_inner, ensure_slot, teardown
from corral.network.slot_plan import SlotLayout, SlotPlan, indices

__all__ = ["SlotNetwork"]

log = logging.getLogger(__name__)


class SlotNetwork:
    """The real ``Network``: one slot per lease, built on lease and torn down on release.

    With ``spare`` > 0 it keeps up to that many slots built ahead, unleased, in ``_spare``:
    ``lease()`` hands one out at once (building a slot takes 20-40 ms) and a background task builds
    its replacement. ``build_ahead(n)`` raises the target by ``n`` for a burst about to come (a
    fork's children): ``_burst`` extra spares, each taken off the target again when leased.
    Spares are counted as neither leased nor free (``spares``), are never reaped as stale, and
    ``close_spares()`` (daemon shutdown) or ``close()`` tears them down.

    Invariants: an index is in at most one of ``_leased`` (handed out), ``_spare`` (built ahead)
    and ``_busy`` (being built, torn down or reaped); all are only changed under ``_lock``, and
    the blocking kernel work runs outside it, so slots are built and torn down concurrently.
    ``lease()`` without an index never picks an index whose namespaces exist: they may belong
    to a running sandbox of a previous daemon that is yet to be adopted with ``lease(index)``.
    ``_known`` holds the indices this instance built or adopted; ``close()`` retries the teardown
    of those that are not leased. ``_configured`` holds the built (not adopted) indices whose
    sandbox namespace has been given its inner address and has not been ``prepare``d since: the
    first ``prepare`` of such a slot (its first sandbox's boot) has nothing to do.
    One prefix belongs to one ``SlotNetwork`` at a time (tests use their own prefixes).
    """

    def __init__(
        self,
        prefix: str = "corral",
        subnet: str = "10.200.0.0/16",
        *,
        spare: int = 0,
        egress_uplinks: tuple[str, ...] = (),
    ) -> None:
        self._plan = SlotPlan(prefix, subnet)
        self._egress_uplinks = egress_uplinks
        self._lock = asyncio.Lock()
        self._leased: dict[int, Slot] = {}
        self._spare: dict[int, Slot] = {}
        self._spare_target = spare
        self._burst = 0
        self._refill: asyncio.Task[None] | None = None
        self._busy: set[int] = set()
        self._known: set[int] = set()
        self._configured: set[int] = set()
        self._host_rules_ready = False
        self._closed = False

    @property
    def plan(self) -> SlotPlan:
        return self._plan

    @property
    def leased(self) -> list[Slot]:
        """The slots this instance has leased, by index."""
        return [self._leased[index] for index in sorted(self._leased)]

    @property
    def spares(self) -> list[Slot]:
        """The slots built ahead and not leased, by index."""
        return [self._spare[index] for index in sorted(self._spare)]

    async def lease(self, index: int | None = None, *, refill: bool = True) -> Slot:
        if index is None and self._spare_target:
            async with self._lock:
                self._check_open()
                self._burst = max(0, self._burst - 1)  # one of a burst came: built or not
                if self._spare:
                    slot = self._spare.pop(min(self._spare))
                    self._leased[slot.index] = slot
                    if refill:
                        self._start_refill()
                    return slot
            slot = await self._build_slot(None)
            if refill:
                self.refill()
            return slot
        return await self._build_slot(index)

    def refill(self) -> None:
        if self._closed or not self._spare_target:
            return
        # No _lock needed: one event-loop step, and _fill_spares re-reads the target under it.
        self._start_refill()

    def build_ahead(self, count: int) -> None:
        """Build ``count`` more spares now, in the background, for leases about to come; a
        negative ``count`` withdraws what such a call asked for and no lease took."""
        if self._closed or not self._spare_target:
            return
        self._burst = max(0, self._burst + count)
        if count > 0 and (self._refill is None or self._refill.done()):  # no _lock needed:
            # one event-loop step, and _fill_spares re-reads the target under the lock
            self._refill = asyncio.create_task(self._fill_spares(), name="slot-spares")

    def _start_refill(self) -> None:
        """(Under ``_lock``.) Build spares up to the target in the background."""
        if self._refill is None or self._refill.done():
            self._refill = asyncio.create_task(self._fill_spares(), name="slot-spares")

    async def _fill_spares(self) -> None:
        while True:
            async with self._lock:
                if self._closed or len(self._spare) >= self._spare_target + self._burst:
                    return
            try:
                if await self._build_slot(None, spare=True) is None:
                    return
            except NetworkFailure as exc:
                log.warning("building a spare slot failed: %s", exc)
                return

    async def close_spares(self) -> None:
        """Tear down the spare slots (daemon shutdown; leased slots stay for their sandboxes)."""
        async with self._lock:
            self._spare_target = self._burst = 0
            refill = self._refill
        if refill is not None:  # not cancelled: a build in a thread would outlive it
            await refill
        async with self._lock:
            spares = sorted(self._spare)
            self._spare.clear()
            self._configured.difference_update(spares)
            self._busy.update(spares)
        try:
            for index in spares:
                await asyncio.to_thread(teardown, self._plan.layout(index))
                self._known.discard(index)
        finally:
            async with self._lock:
                self._busy.difference_update(spares)

    @overload
    async def _build_slot(self, index: int | None) -> Slot: ...

    @overload
    async def _build_slot(self, index: None, *, spare: bool) -> Slot | None: ...

    async def _build_slot(self, index: int | None, *, spare: bool = False) -> Slot | None:
        """Build (or adopt) a slot and lease it; with ``spare``, keep it as a spare instead,
        or tear it down again (None) if spares are no longer wanted by then."""
        async with self._lock:
            self._check_open()
            if index is None:
                index = self._pick_free_index()
                adopt = False
            else:
                self._plan.layout(index)  # range check
                if index in self._leased or index in self._busy or index in self._spare:
                    raise NetworkFailure(f"slot {index} is already leased")
                adopt = self._exists(index)
            if not self._host_rules_ready:
                await asyncio.to_thread(self._commit_host_rules)
                self._host_rules_ready = True
            self._busy.add(index)
        layout = self._plan.layout(index)
        try:
            await asyncio.to_thread(self._build, layout, adopt)
        finally:
            async with self._lock:
                self._busy.discard(index)
        slot = Slot(
            index=index,
            netns_name=layout.sandbox_ns,
            netns_path=layout.sandbox_ns_path,
            host_address=layout.slot_address,
        )
        async with self._lock:
            self._known.add(index)
            if not adopt:  # ensure_slot gave the sandbox namespace its inner address
                self._configured.add(index)
            if not spare:
                self._leased[index] = slot
                return slot
            wanted = not self._closed and len(self._spare) < self._spare_target + self._burst
            if wanted:
                self._spare[index] = slot
                return slot
            self._configured.discard(index)
            self._busy.add(index)
        try:
            await asyncio.to_thread(teardown, layout)
            self._known.discard(index)
        finally:
            async with self._lock:
                self._busy.discard(index)
        return None

    async def prepare(self, slot: Slot) -> None:
        async with self._lock:
            self._check_leased(slot)
            if slot.index in self._configured:  # built for this lease: nothing stripped it
                self._configured.discard(slot.index)
                return
        layout = self._plan.layout(slot.index)
        try:
            await asyncio.to_thread(run_in_netns, layout.sandbox_ns, configure_inner)
        except NetworkFailure as exc:
            raise NetworkFailure(f"preparing slot {slot.index}: {exc}") from exc
        except (NetlinkError, OSError) as exc:
            raise NetworkFailure(f"preparing slot {slot.index}: {describe(exc)}") from exc

    async def traffic(self, slot: Slot) -> Traffic | None:
        async with self._lock:
            self._check_leased(slot)
        layout = self._plan.layout(slot.index)
        table = self._plan.table
        try:
            return await asyncio.to_thread(
                run_in_netns, layout.slot_ns, lambda: firewall.read_traffic(table)
            )
        except NetworkFailure as exc:
            raise NetworkFailure(f"reading the traffic of slot {slot.index}: {exc}") from exc
        except (NetlinkError, OSError) as exc:
            raise NetworkFailure(
                f"reading the traffic of slot {slot.index}: {describe(exc)}"
            ) from exc

    async def release(self, slot: Slot) -> None:
        async with self._lock:
            self._check_leased(slot)
            del self._leased[slot.index]
            self._configured.discard(slot.index)
            self._busy.add(slot.index)
        try:
            await asyncio.to_thread(teardown, self._plan.layout(slot.index))
            self._known.discard(slot.index)
        finally:
            async with self._lock:
                self._busy.discard(slot.index)

    async def close(self) -> None:
        await self.close_spares()
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            leftovers = sorted(self._known - set(self._leased) - self._busy)
            self._busy.update(leftovers)
        failures: list[str] = []
        for index in leftovers:
            try:
                await asyncio.to_thread(teardown, self._plan.layout(index))
            except NetworkFailure as exc:
                failures.append(str(exc))
        try:
            await asyncio.to_thread(self._delete_host_rules)
        except NetworkFailure as exc:
            failures.append(str(exc))
        if failures:
            raise NetworkFailure("; ".join(failures))

    async def reap_stale(self, keep: set[int]) -> list[int]:
        """Tear down every slot of this prefix found on the host that is neither in ``keep`` nor
        leased here (leftovers of a crash). Returns the reaped indices."""
        async with self._lock:
            self._check_open()
            found = await asyncio.to_thread(self._indices_on_host)
            stale = sorted(found - set(keep) - set(self._leased) - set(self._spare) - self._busy)
            self._busy.update(stale)
        try:
            for index in stale:
                await asyncio.to_thread(teardown, self._plan.layout(index))
                self._known.discard(index)
        finally:
            async with self._lock:
                self._busy.difference_update(stale)
        return stale

    # -- bookkeeping (under _lock) -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise NetworkFailure(f"network {self._plan.prefix!r} is closed")

    def _check_leased(self, slot: Slot) -> None:
        if self._leased.get(slot.index) != slot:
            raise NetworkFailure(f"slot {slot.index} is not leased")

    def _pick_free_index(self) -> int:
        on_host = self._netnsindices()
        for index in range(self._plan.capacity):
            if (
                index not in self._leased
                and index not in self._spare
                and index not in self._busy
                and index not in on_host
            ):
                return index
        raise NoFreeSlot(f"all {self._plan.capacity} slots of {self._plan.prefix!r} are in use")

    def _exists(self, index: int) -> bool:
        return index in self._netnsindices()

    def _netnsindices(self) -> set[int]:
        # Listing a tmpfs directory is quick enough to do on the event loop.
        return indices(self._plan.index_of_netns, list_netns())

    # -- blocking work (in worker threads) -----------------------------------------------------

    def _indices_on_host(self) -> set[int]:
        with open_ipr("listing host links") as ipr:
            links = [link.get("ifname") for link in ipr.link("dump")]
        return self._netnsindices() | indices(self._plan.index_of_veth, links)

    def _commit_host_rules(self) -> None:
        rules = firewall.HostRules(
            table=self._plan.table,
            veth_pattern=self._plan.veth_pattern,
            subnet=str(self._plan.subnet),
            egress_uplinks=self._egress_uplinks,
        )
        firewall.commit(rules.render(), f"network {self._plan.prefix!r}")

    def _delete_host_rules(self) -> None:
        firewall.delete_table(self._plan.table, f"network {self._plan.prefix!r}")

    def _build(self, layout: SlotLayout, adopt: bool) -> None:
        """Create whatever of the slot is missing; adoption leaves existing pieces untouched."""
        verb = "adopting" if adopt else "setting up"
        try:
            ensure_slot(layout, self._plan.table, adopt)
        except Exception as exc:
            if not adopt:
                try:
                    teardown(layout)
                except NetworkFailure as cleanup:
                    log.warning("cleaning up after failed set-up: %s", cleanup)
            if isinstance(exc, NetworkFailure):
                raise NetworkFailure(f"{verb} slot {layout.index}: {exc}") from exc
            raise NetworkFailure(f"{verb} slot {layout.index}: {describe(exc)}") from exc
