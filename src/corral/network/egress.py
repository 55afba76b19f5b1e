"""The one owner of a slot's egress nftables state: render it from the policy, commit it.

The egress ruleset is its own ``inet`` table (``{table}_egress``) inside the slot namespace, beside
the slot ruleset (``firewall.SlotRules``) that keeps dropping everything the sandbox opens unless
this table marks it (``ACCEPT_MARK``; marks never cross a namespace, so a sandbox cannot set one):

- ``classify`` (prerouting, mangle): every packet the sandbox sends in the original direction of
  its connection is judged afresh, in the order of ``policy``'s docstring, and marked ``ACCEPT``
  (forward it), ``PROXY`` (TCP 80/443 for host-name rules, TCP 443 for a sandbox with brokered
  secrets (``intercept``): redirect to the egress proxy) or not at all. Judging every packet,
  not only new connections, is what makes a live change cut
  established connections at once: their next packet is refused;
  With host-name rules, TCP to the fast ports (``fast_ports``) is judged by its conntrack mark
  instead: ``CT_ALLOWED`` forwards, ``CT_PROXIED`` goes to the proxy, ``CT_DENIED`` is
  refused, anything else (a SYN, a first flight, a flow whose judged bytes the server has not
  acknowledged yet) is marked ``QUEUE_SENT`` for the first-flight judge (``first_flight.py``;
  an ``ip mangle`` rule of ``fast_path.py`` queues what carries that mark: nft 1.0.6's own
  ``queue`` expression is not in this kernel, the xtables target is);
- ``answers`` (forward, mangle): the server's answers of a ``CT_PENDING`` flow are marked
  ``QUEUE_ANSWER`` (queued likewise, after de-NAT), so the judge sees when the server has
  acknowledged the judged bytes;
- ``redirect`` (nat prerouting): ``PROXY`` packets go to the proxy's port on the slot's side
  (their flow is marked ``CT_PROXIED``);
- ``refuse`` (forward, before the slot ruleset): turns the judge's verdict marks into conntrack
  marks (``PENDING``, ``CONFIRM``, ``DENY``); what is not ``ACCEPT`` or ``PENDING`` is rejected
  (TCP with a reset, so the sandbox's socket fails at once, the rest with an ICMP error);
- ``uplink`` (nat postrouting): egress leaves with the slot's address, because every sandbox has
  the same inner address and the host could not route answers back to it.

The resolver (``INNER_GATEWAY:53``) is always reachable; nothing else on the slot's side is.
Committing it, and deleting the conntrack entries of the flows a new policy forbids, is
``egress_apply.py``'s (``allows_forward`` here is the classify chain's mirror in Python).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from functools import cached_property

from corral.network import firewall
from corral.network.base import INNER_ADDRESS, INNER_GATEWAY
from corral.network.policy import (
    ALWAYS_BLOCKED,
    SANDBOX_SERVICE_NET,
    EgressPolicy,
    EgressRule,
    ProjectService,
)

__all__ = [
    "ACCEPT_MARK",
    "CONFIRM_MARK",
    "CT_ALLOWED",
    "CT_DENIED",
    "CT_PENDING",
    "CT_PROXIED",
    "DENY_MARK",
    "DNS_PORT",
    "FIRST_FLIGHT_QUEUE",
    "MARK_MASK",
    "PENDING_MARK",
    "PROXY_MARK",
    "QUEUE_ANSWER_MARK",
    "QUEUE_SENT_MARK",
    "EgressContext",
    "SlotEgress",
    "allows_forward",
    "fast_ports",
    "is_service_address",
    "reaches_service",
]

MARK_MASK = 0xFFFF0000
ACCEPT_MARK = 0x2B8E0001
PROXY_MARK = 0x2B8E0002
# Set by the first-flight judge's verdicts (first_flight.py), turned into conntrack marks here.
PENDING_MARK = 0x2B8E0003  # allowed, until the server has the judged bytes: CT_PENDING
CONFIRM_MARK = 0x2B8E0004  # (on the server's answer) it has them: CT_ALLOWED
DENY_MARK = 0x2B8E0005  # refused: CT_DENIED, and a reset
# What the classify chains mark for the queue (outside the accepting range on purpose: without
# the queue's rule such a packet is refused like any unmarked one).
QUEUE_SENT_MARK = 0x2B8F0001
QUEUE_ANSWER_MARK = 0x2B8F0002
CT_ALLOWED = 0x2B8E0011
CT_PENDING = 0x2B8E0012
CT_DENIED = 0x2B8E0013
CT_PROXIED = 0x2B8E0014
FIRST_FLIGHT_QUEUE = 0
DNS_PORT = 53
PROXIED_PORTS = (80, 443)
BROKERED_PORTS = (443,)


@dataclass(frozen=True)
class EgressContext:
    """What the policy is rendered against: the slot network of all sandboxes, the host's own
    addresses, the project's services, and where the proxy listens in the slot namespace."""

    slot_subnet: str
    host_addresses: tuple[str, ...] = ()
    services: tuple[ProjectService, ...] = ()
    proxy_port: int = 15001

    def blocked(self) -> list[str]:
        """The always-blocked networks, merged (nft interval sets refuse overlaps)."""
        return [str(net) for net in self._blocked_networks]

    def is_blocked(self, address: str) -> bool:
        ip = ipaddress.IPv4Address(address)
        return any(ip in net for net in self._blocked_networks)

    @cached_property
    def _blocked_networks(self) -> list[ipaddress.IPv4Network]:
        nets = [ipaddress.IPv4Network(net) for net in (*ALWAYS_BLOCKED, self.slot_subnet)]
        nets += [ipaddress.IPv4Network(f"{addr}/32") for addr in self.host_addresses]
        return list(ipaddress.collapse_addresses(nets))


@dataclass(frozen=True)
class SlotEgress:
    """The egress ruleset of one slot (pure data; ``render`` is the nft text)."""

    table: str
    uplink: str
    downlink: str
    slot_address: str
    policy: EgressPolicy
    context: EgressContext = field(default_factory=lambda: EgressContext("10.200.0.0/16"))
    intercept: bool = False  # the sandbox has brokered secrets: its TLS goes to the proxy

    @property
    def table_name(self) -> str:
        return f"{self.table}_egress"

    def render(self, *, new: bool = False) -> str:
        """The nft text that replaces the table (deleting it first, in the same transaction);
        with ``new``, the text that creates it and fails, applying nothing, if it exists."""
        ipaddress.IPv4Address(self.slot_address)
        firewall._check_name(self.table_name)
        firewall._check_ifname(self.uplink)
        firewall._check_ifname(self.downlink)
        policy, ctx = self.policy, self.context
        accept = f"meta mark set {ACCEPT_MARK:#010x} return"
        lines = [
            f'iifname != "{self.downlink}" return',
            "ct direction reply return",
            "meta nfproto ipv6 drop",
            f"ip daddr {INNER_GATEWAY} meta l4proto {{ tcp, udp }} th dport {DNS_PORT} {accept}",
            f"ip daddr {INNER_GATEWAY} return",
        ]
        # A sandbox service's address (a port of another sandbox) is not routed: the proxy
        # takes those connections and forwards them (proxy.py).
        to_proxy = f"meta mark set {PROXY_MARK:#010x} return"
        lines += [f"{match} return" for rule in policy.deny for match in _matches(rule, ctx)]
        lines += [line for rule in policy.allow for line in _allowing(rule, ctx, accept, to_proxy)]
        if policy.mode.project:
            lines += _allowing(EgressRule("project"), ctx, accept, to_proxy)
        lines.append(f"ip daddr {{ {', '.join(ctx.blocked())} }} return")
        fast = fast_ports(policy, self.intercept)
        if fast:
            ports = f"tcp dport {{ {', '.join(str(port) for port in fast)} }}"
            lines += [
                f"{ports} ct mark {CT_ALLOWED:#010x} {accept}",
                f"{ports} ct mark {CT_PROXIED:#010x} {to_proxy}",
                f"{ports} ct mark {CT_DENIED:#010x} return",
                f"{ports} meta mark set {QUEUE_SENT_MARK:#010x} return",
            ]
        proxied = [port for port in _proxied_ports(policy, self.intercept) if port not in fast]
        if proxied:
            listed = ", ".join(str(port) for port in proxied)
            lines.append(f"tcp dport {{ {listed} }} meta mark set {PROXY_MARK:#010x} return")
        if policy.mode.internet:
            lines.append(f"meta mark set {ACCEPT_MARK:#010x}")
        classify = "\n".join(f"        {line}" for line in lines)
        down = f'iifname "{self.downlink}"'
        up = f'iifname "{self.uplink}"'
        to_judge_answer = f"meta mark set {QUEUE_ANSWER_MARK:#010x}"
        to_proxied, denied = f"ct mark set {CT_PROXIED:#010x}", f"ct mark set {CT_DENIED:#010x}"
        make = firewall._create_table if new else firewall._replace_table
        return make(
            self.table_name,
            f"""\
    chain sbx_classify {{
        type filter hook prerouting priority mangle - 1; policy accept;
{classify}
    }}
    chain sbx_answers {{
        type filter hook forward priority mangle - 1; policy accept;
        {up} ct direction reply ct mark {CT_PENDING:#010x} {to_judge_answer}
    }}
    chain sbx_proxy {{
        type nat hook prerouting priority dstnat; policy accept;
        {down} meta mark {PROXY_MARK:#010x} {to_proxied}
        {down} meta mark {PROXY_MARK:#010x} meta l4proto tcp redirect to :{ctx.proxy_port}
    }}
    chain sbx_refuse {{
        type filter hook forward priority filter - 10; policy accept;
        {up} meta mark {CONFIRM_MARK:#010x} ct mark set {CT_ALLOWED:#010x}
        {down} ct direction reply accept
        {down} meta mark {ACCEPT_MARK:#010x} accept
        {down} meta mark {PENDING_MARK:#010x} ct mark set {CT_PENDING:#010x} accept
        {down} meta mark {DENY_MARK:#010x} {denied}
        {down} meta l4proto tcp reject with tcp reset
        {down} reject with icmpx type admin-prohibited
    }}
    chain sbx_snat {{
        type nat hook postrouting priority srcnat; policy accept;
        oifname "{self.uplink}" ip saddr {INNER_ADDRESS} snat ip to {self.slot_address}
    }}
""",
        )


def fast_ports(policy: EgressPolicy, intercept: bool) -> tuple[int, ...]:
    """The ports whose flows the first-flight judge decides while the kernel forwards them (a
    sandbox with host-name rules): HTTP and TLS, but TLS only when the credential broker need
    not see it (a sandbox with brokered secrets sends all its TLS to the proxy)."""
    if not policy.has_host_rules:
        return ()
    return (80,) if intercept else PROXIED_PORTS


def _proxied_ports(policy: EgressPolicy, intercept: bool) -> tuple[int, ...]:
    if policy.has_host_rules:
        return PROXIED_PORTS
    return BROKERED_PORTS if intercept else ()


def allows_forward(
    policy: EgressPolicy,
    ctx: EgressContext,
    address: str,
    port: int | None,
    protocol: str | None,
    intercept: bool = False,
) -> bool:
    """Whether ``sbx_classify`` forwards a flow to ``address`` (``port``/``protocol`` None for
    anything but TCP and UDP) -- its mirror in Python, used to find the established flows a new
    policy forbids. Flows the proxy takes (host-name rules, TCP 80/443, sandbox services) count
    as not forwarded."""

    def matches(rule: EgressRule) -> bool:
        return _rule_matches(rule, ctx, address, port, protocol)

    if any(matches(rule) for rule in policy.deny):
        return False
    for rule in policy.allow:
        if matches(rule):
            return not (rule.kind == "project" and is_service_address(address))
    if policy.mode.project and matches(EgressRule("project")):
        return not is_service_address(address)
    if ctx.is_blocked(address):
        return False
    if protocol == "tcp" and port in _proxied_ports(policy, intercept):
        return False
    return policy.mode.internet


def reaches_service(policy: EgressPolicy, ctx: EgressContext, address: str, port: int) -> bool:
    """Whether ``sbx_classify`` sends a TCP connection to a sandbox service (``address`` in
    ``SANDBOX_SERVICE_NET``) to the proxy: not denied, and a project rule or the mode covers it
    before any address rule forwards it."""
    if any(_rule_matches(rule, ctx, address, port, "tcp") for rule in policy.deny):
        return False
    for rule in policy.allow:
        if _rule_matches(rule, ctx, address, port, "tcp"):
            return rule.kind == "project"
    return policy.mode.project and _rule_matches(EgressRule("project"), ctx, address, port, "tcp")


def is_service_address(address: str) -> bool:
    return ipaddress.IPv4Address(address) in SANDBOX_SERVICE_NET


def _rule_matches(
    rule: EgressRule, ctx: EgressContext, address: str, port: int | None, protocol: str | None
) -> bool:
    if rule.kind == "project":
        return any(
            (proto, addr, target) == (protocol, address, port)
            for proto, addr, target in rule.project_targets(ctx.services)
        )
    ip = ipaddress.IPv4Address(address)
    if rule.kind != "cidr" or rule.network is None or ip not in rule.network:
        return False
    if rule.protocol is not None and rule.protocol != protocol:
        return False
    if rule.ports is None:
        return True
    in_range = port is not None and rule.ports[0] <= port <= rule.ports[1]
    return protocol in ("tcp", "udp") and in_range


def _allowing(rule: EgressRule, ctx: EgressContext, accept: str, to_proxy: str) -> list[str]:
    """The classify lines of one allow rule: forwarded, or to the proxy for sandbox services."""
    if rule.kind != "project":
        return [f"{match} {accept}" for match in _matches(rule, ctx)]
    return [
        f"ip daddr {address} meta l4proto {protocol} th dport {port} "
        + (to_proxy if is_service_address(address) else accept)
        for protocol, address, port in rule.project_targets(ctx.services)
    ]


def _matches(rule: EgressRule, ctx: EgressContext) -> list[str]:
    """nft match expressions for one address or project rule (host rules render none: the
    proxy and the resolver apply them)."""
    if rule.kind == "host":
        return []
    if rule.kind == "project":
        return [
            f"ip daddr {address} meta l4proto {protocol} th dport {port}"
            for protocol, address, port in rule.project_targets(ctx.services)
        ]
    assert rule.network is not None
    match = f"ip daddr {rule.network}"
    if rule.ports is not None:
        low, high = rule.ports
        ports = str(low) if low == high else f"{low}-{high}"
        protocols = rule.protocol or "{ tcp, udp }"
        return [f"{match} meta l4proto {protocols} th dport {ports}"]
    if rule.protocol is not None:
        return [f"{match} meta l4proto {rule.protocol}"]
    return [match]
