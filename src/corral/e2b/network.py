"""E2B's sandbox network options, translated to corral's egress policy and back.

E2B (``allow_internet_access``, ``network={allow_out, deny_out, dns_servers, ...}``, and
``PUT /sandboxes/{id}/network``) and corral (a mode plus allow and deny rules, docs/network.md)
differ in two ways this module bridges:

- E2B's "no internet" is ``allow_internet_access=False`` or ``deny_out`` holding ``0.0.0.0/0``;
  corral's is a mode without the internet. The internet part of the mode is switched, the
  project part (corral's project services) kept: ``project_internet`` <-> ``project``,
  ``internet`` <-> ``airgapped``.
- In E2B an ``allow_out`` entry wins over a ``deny_out`` entry; in corral a deny rule wins. Other
  deny entries become corral deny rules, so an allow address inside a denied range (other than
  ``0.0.0.0/0``) cannot be expressed: it is refused with 400 naming both, never mistranslated.

Entries are CIDRs, IPv4 addresses or host names (``*.name`` too), which corral's rule parser
takes as they are. ``dns_servers`` opens port 53 of each server. Options corral has no mechanism
for (per-host transform ``rules``, an ``egress_proxy``, ``mask_request_host``, ``https_ports``)
are refused with 400 naming them. ``allow_public_traffic`` (which SDKs before 2.56 send as
``true`` whenever ``network`` is given) is accepted and changes nothing: a port reached through
the E2B front always takes the sandbox's traffic or envd token; public ports are corral's own
(``corral port open --public``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from corral.service.errors import InvalidRequest
from corral.service.records import EgressPolicy, EgressRule, NetworkMode, PolicyError

__all__ = ["ALL_TRAFFIC", "E2bEgress", "create_egress", "network_info", "update_egress"]

ALL_TRAFFIC = "0.0.0.0/0"
MAX_ENTRIES = 256
MAX_DNS_SERVERS = 10
# Each field under its camelCase (SDK >= 2.51) and snake_case (older bodies) name.
ALIASES = {
    "allowOut": "allow_out",
    "denyOut": "deny_out",
    "dnsServers": "dns_servers",
    "allowPublicTraffic": "allow_public_traffic",
    "maskRequestHost": "mask_request_host",
    "httpsPorts": "https_ports",
    "egressProxy": "egress_proxy",
    "allowInternetAccess": "allow_internet_access",
}
KNOWN = {
    "allow_out",
    "deny_out",
    "dns_servers",
    "allow_public_traffic",
    "mask_request_host",
    "https_ports",
    "egress_proxy",
    "rules",
}
WITH_INTERNET = {
    NetworkMode.PROJECT: NetworkMode.PROJECT_INTERNET,
    NetworkMode.AIRGAPPED: NetworkMode.INTERNET,
}
WITHOUT_INTERNET = {v: k for k, v in WITH_INTERNET.items()}


@dataclass(frozen=True)
class E2bEgress:
    """What to give ``SandboxService``: a mode (None: the workspace's default) and rule texts."""

    mode: str | None
    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)


def switch_internet(mode: NetworkMode, internet: bool) -> NetworkMode:
    """``mode`` with the internet on or off, its project part unchanged."""
    if internet:
        return WITH_INTERNET.get(mode, mode)
    return WITHOUT_INTERNET.get(mode, mode)


def normalized(network: Any, *, extra: frozenset[str] = frozenset()) -> dict[str, Any]:
    if network is None:
        return {}
    if not isinstance(network, dict):
        raise InvalidRequest("'network' must be an object")
    out: dict[str, Any] = {}
    for key, value in network.items():
        name = ALIASES.get(key, key)
        if name not in KNOWN | extra:
            raise InvalidRequest(f"corral does not know the network field {key!r}")
        out[name] = value
    return out


def entries(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidRequest(f"'network.{what}' must be a list of strings")
    if len(value) > MAX_ENTRIES:
        raise InvalidRequest(f"'network.{what}' holds at most {MAX_ENTRIES} entries")
    return [v.strip() for v in value]


def refuse_unsupported(options: dict[str, Any]) -> None:
    refused = []
    if options.get("rules"):
        refused.append("network.rules (per-host request transforms)")
    if options.get("egress_proxy"):
        refused.append("network.egress_proxy (corral has no SOCKS5 tunnel)")
    if options.get("mask_request_host"):
        refused.append("network.mask_request_host")
    if options.get("https_ports"):
        refused.append("network.https_ports")
    if refused:
        raise InvalidRequest("corral cannot honour " + "; ".join(refused))


def dns_rules(value: Any) -> list[str]:
    servers = entries(value, "dns_servers")
    if len(servers) > MAX_DNS_SERVERS:
        raise InvalidRequest(f"'network.dns_servers' holds at most {MAX_DNS_SERVERS} addresses")
    for server in servers:
        try:
            ipaddress.IPv4Address(server)
        except ValueError:
            raise InvalidRequest(f"DNS server {server!r} is not an IPv4 address") from None
    return [f"{server}:53" for server in servers]


def parsed(text: str, what: str) -> EgressRule:
    try:
        return EgressRule.parse(text)
    except PolicyError as exc:
        raise InvalidRequest(f"network.{what} entry {text!r}: {exc}") from exc


def check_precedence(allow: list[str], deny: list[str]) -> None:
    """Refuse an allow address inside a denied range: E2B lets it through, corral would not."""
    denied = [(text, parsed(text, "deny_out")) for text in deny]
    for text in allow:
        rule = parsed(text, "allow_out")
        if rule.network is None:
            continue
        for deny_text, deny_rule in denied:
            if deny_rule.network is not None and rule.network.overlaps(deny_rule.network):
                raise InvalidRequest(
                    f"allow_out {text!r} lies in deny_out {deny_text!r}: in E2B the allow wins, "
                    "in corral a deny rule wins; deny only the addresses around it (or deny "
                    f"{ALL_TRAFFIC} and allow what is needed)"
                )


def translate(
    options: dict[str, Any], internet: bool | None, base: NetworkMode
) -> tuple[E2bEgress, bool]:
    """The corral egress for E2B options; also whether E2B asked anything about the internet."""
    refuse_unsupported(options)
    allow = entries(options.get("allow_out"), "allow_out")
    deny = entries(options.get("deny_out"), "deny_out")
    blocks_all = ALL_TRAFFIC in deny
    deny = [text for text in deny if text != ALL_TRAFFIC]
    check_precedence(allow, deny)
    allow += dns_rules(options.get("dns_servers"))
    said = internet is not None or blocks_all
    on = internet is not False and not blocks_all
    mode = switch_internet(base, on).value if said else None
    return E2bEgress(mode, allow, deny), said


def create_egress(allow_internet_access: Any, network: Any, default_mode: str) -> E2bEgress | None:
    """The egress of a new sandbox from E2B's create body; None: the workspace's default."""
    if allow_internet_access is not None and not isinstance(allow_internet_access, bool):
        raise InvalidRequest("'allow_internet_access' must be true or false")
    options = normalized(network)
    egress, said = translate(options, allow_internet_access, NetworkMode.parse(default_mode))
    if not said and not egress.allow and not egress.deny:
        return None
    if not said:
        egress = E2bEgress(None, egress.allow, egress.deny)
    return egress


def update_egress(body: Any, current: EgressPolicy) -> E2bEgress:
    """The new egress from ``PUT /sandboxes/{id}/network``: it replaces every rule, and what
    it leaves out is cleared (so the internet is on unless it says otherwise)."""
    options = normalized(body, extra=frozenset({"allow_internet_access"}))
    internet = options.pop("allow_internet_access", None)
    if internet is not None and not isinstance(internet, bool):
        raise InvalidRequest("'allow_internet_access' must be true or false")
    egress, _ = translate(options, True if internet is None else internet, current.mode)
    return egress


def network_info(policy: EgressPolicy) -> tuple[bool, dict[str, list[str]]]:
    """(allowInternetAccess, network) as E2B's sandbox detail shows them."""
    deny = [rule.text for rule in policy.deny]
    if not policy.mode.internet:
        deny.insert(0, ALL_TRAFFIC)
    return policy.mode.internet, {"allowOut": [rule.text for rule in policy.allow], "denyOut": deny}
