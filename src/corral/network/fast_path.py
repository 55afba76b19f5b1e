"""The fast path's event-loop side: one NFQUEUE per slot namespace, read on the daemon's event
loop and answered by the sandbox's ``first_flight.FirstFlights``.

A sandbox with host-name rules gets it (``serve``) before its egress table is committed, so the
table never marks a packet for a queue nobody reads (such a packet would be dropped: the
queue's rule has no ``bypass``, and a marked packet without the rule is refused by the slot).

The queue's two rules live in the slot's ``ip mangle`` table, written with ``iptables-nft``:
this kernel has nft's xtables compatibility but not its ``queue`` expression. They match the
marks the egress table sets (``QUEUE_SENT_MARK`` at prerouting, ``QUEUE_ANSWER_MARK`` at
forward, each at the mangle priority, after the egress table's chains at ``mangle - 1``) and
are written once per slot namespace (checked first, so a daemon restart adds nothing twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
from dataclasses import dataclass

from corral.network import nfqueue
from corral.network.base import NetworkFailure
from corral.network.egress import FIRST_FLIGHT_QUEUE, QUEUE_ANSWER_MARK, QUEUE_SENT_MARK
from corral.network.first_flight import FirstFlights, FlowKey, Verdict
from corral.network.namespaces import netns_path, run_in_netns
from corral.network.sandbox_egress import SandboxEgress
from corral.network.silent_flows import provoke

__all__ = ["FastPath", "ensure_queue_rules"]

log = logging.getLogger(__name__)

_RULES = (("PREROUTING", QUEUE_SENT_MARK), ("FORWARD", QUEUE_ANSWER_MARK))


def _rule(chain: str, mark: int) -> str:
    queue = FIRST_FLIGHT_QUEUE
    return f"-A {chain} -m mark --mark {mark:#x} -j NFQUEUE --queue-num {queue}"


def ensure_queue_rules(slot_ns: str) -> None:
    """Write the queue's rules in ``slot_ns`` unless they are there (blocking: a worker
    thread; one process to list, one to add). Raises NetworkFailure when ``iptables-nft`` is
    missing or refuses."""
    base = ["ip", "netns", "exec", slot_ns]
    try:
        listed = subprocess.run(
            [*base, "iptables-nft", "-w", "-t", "mangle", "-S"], capture_output=True, text=True
        )
        present = set(listed.stdout.splitlines()) if listed.returncode == 0 else set()
        missing = [_rule(chain, mark) for chain, mark in _RULES]
        missing = [rule for rule in missing if rule not in present]
        if not missing:
            return
        script = "*mangle\n" + "\n".join(missing) + "\nCOMMIT\n"
        added = subprocess.run(
            [*base, "iptables-nft-restore", "-w", "--noflush"],
            input=script,
            capture_output=True,
            text=True,
        )
    except OSError as exc:
        raise NetworkFailure(f"writing the first-flight queue's rules: {exc}") from exc
    if added.returncode != 0:
        why = added.stderr.strip()
        raise NetworkFailure(f"writing the first-flight queue's rules in {slot_ns}: {why}")


@dataclass(eq=False)
class _Judge:
    flights: FirstFlights
    queue: nfqueue.QueueSocket
    sweeper: asyncio.Task[None] | None = None


class FastPath:
    """The judges of the sandboxes with a fast path. Not thread-safe: one event loop."""

    def __init__(self, *, timeout: float = 10.0) -> None:
        self._timeout = timeout
        self._judges: dict[str, _Judge] = {}
        self._ruled: set[tuple[str, int]] = set()  # slot namespaces (name, inode) with rules

    def serving(self, sandbox_id: str) -> bool:
        return sandbox_id in self._judges

    async def serve(self, sandbox: SandboxEgress) -> None:
        if sandbox.sandbox_id in self._judges:
            return
        queue = await asyncio.to_thread(self._open, sandbox.slot_ns)
        judge = _Judge(FirstFlights(sandbox, timeout=self._timeout), queue)
        asyncio.get_running_loop().add_reader(queue.fileno(), self._readable, judge)
        judge.sweeper = asyncio.create_task(self._sweep(judge))
        self._judges[sandbox.sandbox_id] = judge

    def _open(self, slot_ns: str) -> nfqueue.QueueSocket:
        ns = (slot_ns, os.stat(netns_path(slot_ns)).st_ino)
        if ns not in self._ruled:
            ensure_queue_rules(slot_ns)
            self._ruled.add(ns)
        try:
            return run_in_netns(slot_ns, lambda: nfqueue.open_queue(FIRST_FLIGHT_QUEUE))
        except OSError as exc:
            raise NetworkFailure(f"binding the first-flight queue of {slot_ns}: {exc}") from exc

    def counts(self, sandbox_id: str) -> dict[str, int]:
        """What the sandbox's judge did (``FirstFlights.counts``); empty without one."""
        judge = self._judges.get(sandbox_id)
        return dict(judge.flights.counts) if judge else {}

    def keep(self, sandbox_id: str) -> frozenset[FlowKey]:
        """After the sandbox's policy changed: the fast-path flows it still allows."""
        judge = self._judges.get(sandbox_id)
        return judge.flights.recheck() if judge else frozenset()

    async def stop(self, sandbox_id: str) -> None:
        judge = self._judges.pop(sandbox_id, None)
        if judge is None:
            return
        asyncio.get_running_loop().remove_reader(judge.queue.fileno())
        if judge.sweeper is not None:
            judge.sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await judge.sweeper
        self._give(judge, judge.flights.release())
        judge.queue.close()  # what is still queued is dropped by the kernel

    async def close(self) -> None:
        for sandbox_id in list(self._judges):
            await self.stop(sandbox_id)

    def _readable(self, judge: _Judge) -> None:
        try:
            packets = judge.queue.read()
        except OSError as exc:
            log.error("sandbox %s: reading its first-flight queue: %s", self._id(judge), exc)
            return
        for packet in packets:
            try:
                verdicts = judge.flights.on_packet(packet.packet_id, packet.payload)
            except Exception:  # a bug must not let a packet through: drop it
                log.exception("sandbox %s: judging a queued packet", self._id(judge))
                verdicts = [(packet.packet_id, nfqueue.DROP, None)]
            self._give(judge, verdicts)

    async def _sweep(self, judge: _Judge) -> None:
        while True:
            await asyncio.sleep(max(self._timeout / 4, 0.1))
            verdicts, silent = judge.flights.expire()
            self._give(judge, verdicts)
            if silent:  # their sandbox answers a SYN, and the slot resets that answer
                slot_ns = judge.flights.sandbox.slot_ns
                try:
                    await asyncio.to_thread(provoke, slot_ns, silent)
                except NetworkFailure as exc:
                    log.warning("sandbox %s: silent flows not reset: %s", self._id(judge), exc)

    def _give(self, judge: _Judge, verdicts: list[Verdict]) -> None:
        for packet_id, verdict, mark in verdicts:
            try:
                judge.queue.verdict(packet_id, verdict, mark)
            except OSError as exc:  # the kernel drops a packet it gets no verdict for
                log.error("sandbox %s: a verdict failed: %s", self._id(judge), exc)

    @staticmethod
    def _id(judge: _Judge) -> str:
        return judge.flights.sandbox.sandbox_id
