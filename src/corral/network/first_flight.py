"""The first-flight judge of one sandbox: decides a host-name-filtered TCP connection from its
first flight while the kernel forwards it, so that a decided flow never passes through the
proxy (``docs/network.md``, "The fast path").

``FirstFlights.on_packet`` takes every packet the slot queues (``nfqueue``) and returns the
verdicts to give now. What is queued (``egress.SlotEgress``): a sandbox's TCP to the fast ports
whose conntrack entry carries no decision yet, and the server's answers of a flow that is
allowed but not yet confirmed. For one connection:

1. SYN: when its destination is one the sandbox's resolver answered for a name the policy
   allows (or any address in an internet mode), it is forwarded and its ISN remembered;
   otherwise it is marked for the proxy (``PROXY_MARK``), which judges it as before. A second
   SYN with another ISN while the flow is undecided is dropped.
2. Payload: reassembled strictly in sequence from ISN + 1 and held (no verdict) until the first
   flight is complete (``sniff.need_more``), bounded by ``sniff.MAX_HEAD`` bytes and
   ``timeout`` seconds. A segment that does not start exactly where the stream has got to
   (out of order, overlapping, urgent data, data on the SYN) is dropped unseen, so only bytes
   in order count; the sender's TCP sends them again.
3. The first flight is judged by ``egress_decision.decide``, as the proxy judges it: allowed
   releases the held packets marked ``PENDING_MARK`` (the slot sets the conntrack mark
   ``CT_PENDING``); denied drops them but the last, which is marked ``DENY_MARK`` (the slot
   answers it with a reset and marks the flow ``CT_DENIED``).
4. Pending: the sandbox's packets are still judged: a segment overlapping the judged bytes
   must repeat them exactly, else the flow is denied. The first server packet that
   acknowledges every judged byte is marked ``CONFIRM_MARK`` (``CT_ALLOWED``): from then on the
   kernel forwards the flow without asking. Until the server has those bytes the sandbox could
   otherwise send other bytes in their place (a retransmission after a loss downstream).

A queued packet of a flow this judge does not know (its state lost, its conntrack entry cut
after a policy change) is denied. ``recheck`` says which flows a new policy keeps.

Pure logic: packets in, verdicts out; the clock is given. Not thread-safe (the event loop).
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from corral.network import nfqueue, sniff
from corral.network.base import INNER_ADDRESS
from corral.network.egress import (
    ACCEPT_MARK,
    CONFIRM_MARK,
    DENY_MARK,
    PENDING_MARK,
    PROXY_MARK,
)
from corral.network.egress_decision import decide
from corral.network.sandbox_egress import SandboxEgress

__all__ = ["FirstFlights", "FlowKey", "Verdict", "fast_target"]

log = logging.getLogger(__name__)

FlowKey = tuple[int, str, int]  # the sandbox's port, the destination address and port
Verdict = tuple[int, int, int | None]  # packet id, nfqueue.ACCEPT/DROP, mark
_FIN, _SYN, _RST, _ACK, _URG = 0x01, 0x02, 0x04, 0x10, 0x20
_HALF = 1 << 31


@dataclass
class _Flow:
    isn: int
    started: float
    data: bytearray = field(default_factory=bytearray)
    held: list[int] = field(default_factory=list)
    judged: bytes | None = None  # the first flight, once allowed
    name: str | None = None
    confirmed: bool = False
    handshaken: bool = False  # the sandbox acknowledged the server's SYN-ACK

    def offset(self, seq: int) -> int:
        """Where ``seq`` lies in the stream (0 = the first byte after the SYN)."""
        return (seq - self.isn - 1) & 0xFFFFFFFF


@dataclass(frozen=True)
class _Segment:
    source: str
    destination: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    payload: bytes


def fast_target(sandbox: SandboxEgress, address: str, port: int) -> bool:
    """Whether a SYN to ``address`` may be forwarded and its first flight judged here: the
    sandbox's resolver answered it for a name the policy allows, or the mode reaches the
    internet; never an always-blocked address (the proxy judges those, as an address rule
    may name them)."""
    policy, context = sandbox.policy, sandbox.context
    if context.is_blocked(address):
        return False
    if policy.mode.internet:
        return True
    return any(policy.name_allowed_by_rule(name) for name in sandbox.names.names_for(address))


class FirstFlights:
    """The flows of one sandbox (see the module docstring). ``max_flows`` bounds the undecided
    flows (a SYN beyond is dropped), ``max_records`` the decided ones kept for ``recheck``
    (the oldest go first; a flow no longer known is cut at the next policy change)."""

    def __init__(
        self,
        sandbox: SandboxEgress,
        *,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        max_flows: int = 256,
        max_records: int = 4096,
    ) -> None:
        self.sandbox = sandbox
        self._timeout = timeout
        self._clock = clock
        self._max_flows = max_flows
        self._max_records = max_records
        self._flows: OrderedDict[FlowKey, _Flow] = OrderedDict()
        # What it did, for logs and tests: packets judged, flows confirmed, flows refused.
        self.counts = {"packets": 0, "confirmed": 0, "refused": 0, "to_proxy": 0}

    def on_packet(self, packet_id: int, packet: bytes) -> list[Verdict]:
        self.counts["packets"] += 1
        segment = _parse(packet)
        if segment is None:
            return [(packet_id, nfqueue.DROP, None)]
        if segment.destination == INNER_ADDRESS:  # a server's answer (queued after de-NAT)
            return self._answer(packet_id, segment)
        return self._sent(packet_id, segment)

    def expire(self) -> tuple[list[Verdict], list[FlowKey]]:
        """Deny the undecided flows older than ``timeout``; forget pending ones that waited
        ten times as long for the server. Returns the verdicts, and the denied flows that
        completed their handshake but held nothing: the slot has no packet of theirs to answer
        with a reset, so the caller has the sandbox send one (``silent_flows.provoke``)."""
        now = self._clock()
        verdicts: list[Verdict] = []
        silent: list[FlowKey] = []
        for key, flow in list(self._flows.items()):
            if flow.judged is None and now - flow.started > self._timeout:
                verdicts += self._deny(key, flow, None, "no complete first flight in time")
                if flow.handshaken and not flow.held:
                    silent.append(key)
            elif not flow.confirmed and now - flow.started > 10 * self._timeout:
                del self._flows[key]
        return verdicts, silent

    def recheck(self) -> frozenset[FlowKey]:
        """After a policy change: the flows to keep (undecided ones are judged by the new
        policy when their first flight is complete); the others are forgotten here and their
        conntrack entries are to be deleted."""
        keep: set[FlowKey] = set()
        for key, flow in list(self._flows.items()):
            judged = flow.judged is not None
            if judged and not decide(self.sandbox, flow.name, key[1], key[2]).allowed:
                del self._flows[key]
                continue
            keep.add(key)
        return frozenset(keep)

    def release(self) -> list[Verdict]:
        """Drop every held packet (the sandbox is going away)."""
        held: list[Verdict] = [
            (pid, nfqueue.DROP, None) for flow in self._flows.values() for pid in flow.held
        ]
        self._flows.clear()
        return held

    # -- the sandbox's packets -------------------------------------------------------------------

    def _sent(self, packet_id: int, seg: _Segment) -> list[Verdict]:
        key = (seg.sport, seg.destination, seg.dport)
        flow = self._flows.get(key)
        if seg.flags & _SYN and not seg.flags & _ACK:
            return [self._syn(packet_id, key, flow, seg)]
        if flow is None:
            return self._deny(key, None, packet_id, "a packet of a flow not seen from its SYN")
        if seg.flags & _RST:
            del self._flows[key]
            return [(packet_id, nfqueue.ACCEPT, ACCEPT_MARK)] + [
                (held, nfqueue.DROP, None) for held in flow.held
            ]
        if seg.flags & (_SYN | _URG):
            return [(packet_id, nfqueue.DROP, None)]
        if flow.judged is not None:
            return [self._after_judged(packet_id, key, flow, seg)]
        if not seg.payload and not seg.flags & _FIN:
            flow.handshaken = True
            return [(packet_id, nfqueue.ACCEPT, ACCEPT_MARK)]  # an ACK of the handshake
        if flow.offset(seg.seq) != len(flow.data):
            return [(packet_id, nfqueue.DROP, None)]  # not where the stream has got to
        flow.data += seg.payload
        flow.held.append(packet_id)
        complete = not sniff.need_more(bytes(flow.data))
        if seg.flags & _FIN or len(flow.data) >= sniff.MAX_HEAD or complete:
            return self._judge(key, flow)
        return []

    def _syn(self, packet_id: int, key: FlowKey, flow: _Flow | None, seg: _Segment) -> Verdict:
        if seg.payload:
            return (packet_id, nfqueue.DROP, None)  # data on a SYN (Fast Open): sent again
        if flow is not None and not flow.confirmed:
            if flow.isn == seg.seq and flow.judged is None:
                return (packet_id, nfqueue.ACCEPT, ACCEPT_MARK)  # the same SYN again
            return (packet_id, nfqueue.DROP, None)  # another ISN for an open flow
        self._flows.pop(key, None)
        if not fast_target(self.sandbox, seg.destination, seg.dport):
            self.counts["to_proxy"] += 1
            return (packet_id, nfqueue.ACCEPT, PROXY_MARK)
        if sum(1 for f in self._flows.values() if f.judged is None) >= self._max_flows:
            return (packet_id, nfqueue.DROP, None)
        self._flows[key] = _Flow(seg.seq, self._clock())
        return (packet_id, nfqueue.ACCEPT, ACCEPT_MARK)

    def _judge(self, key: FlowKey, flow: _Flow) -> list[Verdict]:
        head = bytes(flow.data)
        tls = sniff.is_tls(head)
        name = sniff.tls_server_name(head) if tls else sniff.http_host(head)
        verdict = decide(self.sandbox, name, key[1], key[2])
        if not verdict.allowed:
            return self._deny(key, flow, None, verdict.reason)
        flow.judged, flow.name = head, name
        held, flow.held, flow.data = flow.held, [], bytearray()
        return [(pid, nfqueue.ACCEPT, PENDING_MARK) for pid in held]

    def _after_judged(self, packet_id: int, key: FlowKey, flow: _Flow, seg: _Segment) -> Verdict:
        assert flow.judged is not None
        offset = flow.offset(seg.seq)
        if offset >= _HALF:
            return (packet_id, nfqueue.DROP, None)  # before the stream's start
        again = flow.judged[offset : offset + len(seg.payload)]
        if seg.payload[: len(again)] != again:
            return self._deny(key, flow, packet_id, "other bytes in place of the judged ones")[0]
        # Not PENDING_MARK: the conntrack mark is set already and may have moved on to allowed.
        return (packet_id, nfqueue.ACCEPT, ACCEPT_MARK)

    def _deny(
        self, key: FlowKey, flow: _Flow | None, packet_id: int | None, reason: str
    ) -> list[Verdict]:
        log.info("sandbox %s: refused %s:%d: %s", self.sandbox.sandbox_id, key[1], key[2], reason)
        self._flows.pop(key, None)
        self.counts["refused"] += 1
        held = list(flow.held) if flow is not None else []
        if packet_id is not None:
            held.append(packet_id)
        if not held:
            return []
        # The last packet is answered with a reset by the slot, which marks the flow denied.
        return [(pid, nfqueue.DROP, None) for pid in held[:-1]] + [
            (held[-1], nfqueue.ACCEPT, DENY_MARK)
        ]

    # -- the server's answers --------------------------------------------------------------------

    def _answer(self, packet_id: int, seg: _Segment) -> list[Verdict]:
        key = (seg.dport, seg.source, seg.sport)
        flow = self._flows.get(key)
        if flow is None or flow.judged is None or flow.confirmed:
            return [(packet_id, nfqueue.ACCEPT, None)]
        if seg.flags & _RST:
            del self._flows[key]
            return [(packet_id, nfqueue.ACCEPT, None)]
        acked = flow.offset(seg.ack)
        if seg.flags & _ACK and len(flow.judged) <= acked < _HALF:
            flow.confirmed = True
            self.counts["confirmed"] += 1
            flow.data = bytearray()
            self._flows.move_to_end(key)
            while len(self._flows) > self._max_records:
                oldest = next(iter(self._flows))
                if not self._flows[oldest].confirmed:
                    break
                del self._flows[oldest]
            return [(packet_id, nfqueue.ACCEPT, CONFIRM_MARK)]
        return [(packet_id, nfqueue.ACCEPT, None)]


def _parse(packet: bytes) -> _Segment | None:
    """An IPv4 TCP segment's fields, or None for anything else or anything truncated."""
    if len(packet) < 20 or packet[0] >> 4 != 4 or packet[9] != socket.IPPROTO_TCP:
        return None
    ihl = (packet[0] & 0x0F) * 4
    total = int.from_bytes(packet[2:4], "big")
    if ihl < 20 or total > len(packet) or total < ihl + 20:
        return None
    sport, dport, seq, ack, offset_flags = struct.unpack_from("!HHIIH", packet, ihl)
    data_at = ihl + (offset_flags >> 12) * 4
    if data_at > total or data_at < ihl + 20:
        return None
    return _Segment(
        socket.inet_ntoa(packet[12:16]),
        socket.inet_ntoa(packet[16:20]),
        sport,
        dport,
        seq,
        ack,
        offset_flags & 0x3F,
        packet[data_at:total],
    )
