"""The egress policy of one sandbox: its mode, its allow and deny rules, and their parser.

This module is pure data (no kernel, no I/O): ``egress`` renders it as nftables, ``resolver`` and
``proxy`` consult it for names. A policy is stored as JSON (``EgressPolicy.to_json``).

Rule text (``EgressRule.parse``), case-insensitive, an optional ``/tcp`` or ``/udp`` suffix limits
an address rule to one protocol (both when absent)::

    CIDR[:PORT[-PORT]][/tcp|/udp]       10.1.0.0/16, 192.0.2.7:443, 203.0.113.0/24:8000-8100/udp
    project[:PORT[-PORT]][/tcp|/udp]    the project's services (all of them, or those ports)
    NAME | *.NAME                       a host name for HTTP (80, by Host) and TLS (443, by SNI)

Precedence, first match wins (docs/network.md):

1. IPv6 is dropped, always; no rule can name it.
2. ``deny`` rules: a deny wins over every allow rule and over the mode.
3. ``allow`` rules.
4. The project's services when the mode includes the project.
5. Always blocked: the host's addresses, the slot network, link-local and metadata addresses,
   and the private and special IPv4 ranges (``ALWAYS_BLOCKED``) -- unless step 3 or 4 named them.
6. Host-name rules: TCP 80/443 goes to the egress proxy, which checks the name.
7. The rest of IPv4 ("the internet") when the mode includes the internet; else dropped.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

__all__ = [
    "ALWAYS_BLOCKED",
    "SANDBOX_SERVICE_NET",
    "EgressPolicy",
    "EgressRule",
    "NetworkMode",
    "PolicyError",
    "ProjectService",
    "Protocol",
]

Protocol = Literal["tcp", "udp"]
MAX_RULES = 256
MAX_RULE_TEXT = 300
_IPV4ISH = re.compile(r"^[0-9./]+$")
_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")

# Never "the internet": reachable only when an allow rule (or the project) names them.
ALWAYS_BLOCKED: tuple[str, ...] = (
    "0.0.0.0/8",  # "this network"
    "10.0.0.0/8",  # private
    "100.64.0.0/10",  # carrier-grade NAT; 100.100.100.200 is a cloud metadata address
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local, 169.254.169.254 is the cloud metadata address
    "172.16.0.0/12",  # private
    "192.0.0.0/24",  # IETF protocol assignments
    "192.168.0.0/16",  # private
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved and broadcast
)


class PolicyError(ValueError):
    """A rule or a stored policy is malformed; the message names the text and what is wrong."""


class NetworkMode(StrEnum):
    """What a sandbox reaches before any rule: the project's services, the internet, both, none."""

    PROJECT_INTERNET = "project_internet"
    INTERNET = "internet"
    PROJECT = "project"
    AIRGAPPED = "airgapped"

    @property
    def internet(self) -> bool:
        return self in (NetworkMode.PROJECT_INTERNET, NetworkMode.INTERNET)

    @property
    def project(self) -> bool:
        return self in (NetworkMode.PROJECT_INTERNET, NetworkMode.PROJECT)

    @classmethod
    def parse(cls, text: str) -> NetworkMode:
        try:
            return cls(text.strip().lower())
        except ValueError:
            names = ", ".join(mode.value for mode in cls)
            raise PolicyError(f"unknown network mode {text!r}: use one of {names}") from None


# Where a sandbox service (a port of another sandbox, service.project_services) gets a virtual
# address: its name resolves there; nothing routes it, the egress proxy forwards its connections.
SANDBOX_SERVICE_NET = ipaddress.IPv4Network("169.254.100.0/23")


@dataclass(frozen=True)
class ProjectService:
    """A service of the sandbox's project: ``name`` resolves to ``address``, which the sandbox
    reaches on ``ports`` over ``protocol`` (the service layer provides these)."""

    name: str
    address: str
    ports: tuple[int, ...]
    protocol: Protocol = "tcp"

    def __post_init__(self) -> None:
        ipaddress.IPv4Address(self.address)
        _check_hostname(self.name, self.name)
        for port in self.ports:
            _check_port_number(port, self.name)


@dataclass(frozen=True)
class EgressRule:
    """One parsed rule. ``kind`` is ``cidr`` (``network`` set), ``project`` or ``host``
    (``host`` set, lowercase, maybe ``*.``-prefixed). ``ports`` is an inclusive range or None
    (every port); ``protocol`` None means both TCP and UDP."""

    kind: Literal["cidr", "project", "host"]
    network: ipaddress.IPv4Network | None = None
    ports: tuple[int, int] | None = None
    protocol: Protocol | None = None
    host: str | None = None

    @classmethod
    def parse(cls, text: str) -> EgressRule:
        return _parse_rule(text)

    @property
    def text(self) -> str:
        """The canonical rule text; ``parse(rule.text) == rule``."""
        if self.kind == "host":
            assert self.host is not None
            return self.host
        target = "project" if self.kind == "project" else _network_text(self.network)
        if self.ports is not None:
            low, high = self.ports
            target += f":{low}" if low == high else f":{low}-{high}"
        if self.protocol is not None:
            target += f"/{self.protocol}"
        return target

    def matches_name(self, name: str) -> bool:
        """Whether this host rule covers ``name`` (``*.x`` covers subdomains of x, not x)."""
        if self.kind != "host" or self.host is None:
            return False
        name = name.rstrip(".").lower()
        if self.host.startswith("*."):
            return name.endswith(self.host[1:]) and len(name) > len(self.host) - 1
        return name == self.host

    def matches_port(self, port: int, protocol: Protocol) -> bool:
        if self.protocol is not None and self.protocol != protocol:
            return False
        return self.ports is None or self.ports[0] <= port <= self.ports[1]

    def project_targets(self, services: tuple[ProjectService, ...]) -> list[tuple[str, str, int]]:
        """(protocol, address, port) of the project's services that this project rule covers."""
        return [
            (service.protocol, service.address, port)
            for service in services
            for port in service.ports
            if self.matches_port(port, service.protocol)
        ]


@dataclass(frozen=True)
class EgressPolicy:
    """A sandbox's mode plus its allow and deny rules (in the order given; see the module
    docstring for precedence). Immutable; a change makes a new policy."""

    mode: NetworkMode = NetworkMode.PROJECT_INTERNET
    allow: tuple[EgressRule, ...] = field(default=())
    deny: tuple[EgressRule, ...] = field(default=())

    def __post_init__(self) -> None:
        if len(self.allow) > MAX_RULES or len(self.deny) > MAX_RULES:
            raise PolicyError(
                f"a policy holds at most {MAX_RULES} allow and {MAX_RULES} deny rules"
            )

    @classmethod
    def build(
        cls, mode: str | NetworkMode = NetworkMode.PROJECT_INTERNET, allow: Any = (), deny: Any = ()
    ) -> EgressPolicy:
        """A policy from a mode name and rule texts (what the CLI and API pass)."""
        mode = mode if isinstance(mode, NetworkMode) else NetworkMode.parse(mode)
        for rules in (allow, deny):
            if isinstance(rules, str) or len(rules) > MAX_RULES:
                raise PolicyError(f"rules come as a list of at most {MAX_RULES} strings")
        return cls(
            mode,
            tuple(_dedupe(EgressRule.parse(text) for text in allow)),
            tuple(_dedupe(EgressRule.parse(text) for text in deny)),
        )

    # -- names (resolver and proxy) --------------------------------------------------------------

    @property
    def has_host_rules(self) -> bool:
        return any(rule.kind == "host" for rule in (*self.allow, *self.deny))

    @property
    def reaches_project(self) -> bool:
        return self.mode.project or any(rule.kind == "project" for rule in self.allow)

    def name_denied(self, name: str) -> bool:
        return any(rule.matches_name(name) for rule in self.deny)

    def name_allowed_by_rule(self, name: str) -> bool:
        """Allowed by a host rule and not denied: the proxy lets such a name through to the
        addresses the sandbox's resolver answered for it."""
        return not self.name_denied(name) and any(rule.matches_name(name) for rule in self.allow)

    def resolves(self, name: str) -> bool:
        """Whether the sandbox's resolver forwards a query for ``name`` upstream."""
        if self.name_denied(name):
            return False
        return self.mode.internet or self.name_allowed_by_rule(name)

    # -- storage ---------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "allow": [rule.text for rule in self.allow],
            "deny": [rule.text for rule in self.deny],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Any) -> EgressPolicy:
        if not isinstance(data, dict) or set(data) - {"mode", "allow", "deny"}:
            raise PolicyError("a stored policy is an object with 'mode', 'allow' and 'deny'")
        allow, deny = data.get("allow", []), data.get("deny", [])
        if not isinstance(allow, list) or not isinstance(deny, list):
            raise PolicyError("a stored policy's 'allow' and 'deny' are lists of rule strings")
        if not all(isinstance(text, str) for text in (*allow, *deny)):
            raise PolicyError("a stored policy's rules are strings")
        mode = data.get("mode", NetworkMode.PROJECT_INTERNET.value)
        if not isinstance(mode, str):
            raise PolicyError("a stored policy's 'mode' is a string")
        return cls.build(mode, allow, deny)

    @classmethod
    def loads(cls, text: str) -> EgressPolicy:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise PolicyError(f"a stored policy is not JSON: {exc}") from exc
        return cls.from_json(data)


# -- parsing -------------------------------------------------------------------------------------


def _parse_rule(text: str) -> EgressRule:
    if not isinstance(text, str):
        raise PolicyError(f"a rule is a string, not {type(text).__name__}")
    raw = text
    text = text.strip().lower()
    if not text:
        raise PolicyError("empty rule: write CIDR[:PORT[-PORT]], project[:PORT], or a host name")
    if len(text) > MAX_RULE_TEXT:
        raise PolicyError(f"rule {raw[:40]!r}... is longer than {MAX_RULE_TEXT} characters")
    if "[" in text or text.count(":") >= 2:
        raise PolicyError(f"rule {raw!r}: IPv6 is blocked; rules name IPv4 networks only")
    protocol: Protocol | None = None
    for suffix in ("tcp", "udp"):
        if text.endswith(f"/{suffix}"):
            protocol = suffix
            text = text[: -len(suffix) - 1]
    target, colon, port_text = text.partition(":")
    ports = _parse_ports(port_text, raw) if colon else None
    if target == "project":
        return EgressRule("project", ports=ports, protocol=protocol)
    if _IPV4ISH.match(target):
        return EgressRule(
            "cidr", network=_parse_network(target, raw), ports=ports, protocol=protocol
        )
    if colon or protocol:
        raise PolicyError(
            f"rule {raw!r}: a host-name rule takes no port or protocol; it covers HTTP on 80 and"
            " TLS on 443 (use a CIDR rule for other ports)"
        )
    return EgressRule("host", host=_parse_host(target, raw))


def _parse_ports(text: str, raw: str) -> tuple[int, int]:
    if not text:
        raise PolicyError(f"rule {raw!r}: missing port after ':'")
    low_text, dash, high_text = text.partition("-")
    low = _parse_port(low_text, raw)
    high = _parse_port(high_text, raw) if dash else low
    if high < low:
        raise PolicyError(f"rule {raw!r}: port range {low}-{high} is reversed; write {high}-{low}")
    return low, high


def _parse_port(text: str, raw: str) -> int:
    if not text.isdigit() or len(text) > 5:
        raise PolicyError(f"rule {raw!r}: port {text!r} is not a number from 1 to 65535")
    port = int(text)
    _check_port_number(port, raw)
    return port


def _check_port_number(port: int, what: str) -> None:
    if not 1 <= port <= 65535:
        raise PolicyError(f"rule {what!r}: port {port} is out of range 1-65535")


def _parse_network(text: str, raw: str) -> ipaddress.IPv4Network:
    try:
        network = ipaddress.IPv4Network(text)
    except ValueError as exc:
        hint = ""
        if "host bits set" in str(exc):
            hint = f" (did you mean {ipaddress.IPv4Network(text, strict=False)}?)"
        raise PolicyError(f"rule {raw!r}: {text!r} is not an IPv4 network: {exc}{hint}") from None
    return network


def _parse_host(text: str, raw: str) -> str:
    name = text.rstrip(".")
    if name in ("*", "*.") or name.startswith("*."):
        if name in ("*", "*."):
            raise PolicyError(f"rule {raw!r}: '*.' needs a domain after it, as in *.example.com")
        _check_hostname(name[2:], raw)
        return name
    _check_hostname(name, raw)
    return name


def _check_hostname(name: str, raw: str) -> None:
    if not name:
        raise PolicyError(f"rule {raw!r}: empty host name")
    if len(name) > 253:
        raise PolicyError(f"rule {raw!r}: a host name has at most 253 characters")
    for label in name.lower().split("."):
        if not label:
            raise PolicyError(f"rule {raw!r}: host name {name!r} has an empty label ('..')")
        if not _LABEL.match(label):
            raise PolicyError(
                f"rule {raw!r}: label {label!r} of {name!r} is not a host-name label (letters,"
                " digits, '-' inside, at most 63 characters; '*' only as a leading '*.')"
            )


def _network_text(network: ipaddress.IPv4Network | None) -> str:
    assert network is not None
    return str(network.network_address) if network.prefixlen == 32 else str(network)


def _dedupe(rules: Any) -> list[EgressRule]:
    seen: list[EgressRule] = []
    for rule in rules:
        if rule not in seen:
            seen.append(rule)
    return seen
