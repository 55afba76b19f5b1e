"""Rendering of the egress nftables state: golden slot rulesets and the host's egress lines."""

from __future__ import annotations

import pytest

from corral.network.egress import EgressContext, SlotEgress
from corral.network.firewall import HostRules, SlotRules
from corral.network.policy import EgressPolicy, ProjectService

CONTEXT = EgressContext(
    "10.200.0.0/16", ("192.0.2.1",), (ProjectService("db", "10.5.0.2", (5432,)),)
)

GOLDEN_PROJECT_WITH_RULES = """\
add table inet corral_egress
delete table inet corral_egress
table inet corral_egress {
    chain sbx_classify {
        type filter hook prerouting priority mangle - 1; policy accept;
        iifname != "to-sbx" return
        ct direction reply return
        meta nfproto ipv6 drop
        ip daddr 169.254.0.22 meta l4proto { tcp, udp } th dport 53 meta mark set 0x2b8e0001 return
        ip daddr 169.254.0.22 return
        ip daddr 10.5.0.2/32 meta l4proto { tcp, udp } th dport 5432 return
        ip daddr 198.51.100.0/24 meta l4proto tcp th dport 80-90 meta mark set 0x2b8e0001 return
        ip daddr 203.0.113.9/32 meta l4proto udp meta mark set 0x2b8e0001 return
        ip daddr 10.5.0.2 meta l4proto tcp th dport 5432 meta mark set 0x2b8e0001 return
        @BLOCKED@
        tcp dport { 80, 443 } ct mark 0x2b8e0011 meta mark set 0x2b8e0001 return
        tcp dport { 80, 443 } ct mark 0x2b8e0014 meta mark set 0x2b8e0002 return
        tcp dport { 80, 443 } ct mark 0x2b8e0013 return
        tcp dport { 80, 443 } meta mark set 0x2b8f0001 return
    }
    chain sbx_answers {
        type filter hook forward priority mangle - 1; policy accept;
        iifname "to-host" ct direction reply ct mark 0x2b8e0012 meta mark set 0x2b8f0002
    }
    chain sbx_proxy {
        type nat hook prerouting priority dstnat; policy accept;
        iifname "to-sbx" meta mark 0x2b8e0002 ct mark set 0x2b8e0014
        iifname "to-sbx" meta mark 0x2b8e0002 meta l4proto tcp redirect to :15001
    }
    chain sbx_refuse {
        type filter hook forward priority filter - 10; policy accept;
        iifname "to-host" meta mark 0x2b8e0004 ct mark set 0x2b8e0011
        iifname "to-sbx" ct direction reply accept
        iifname "to-sbx" meta mark 0x2b8e0001 accept
        iifname "to-sbx" meta mark 0x2b8e0003 ct mark set 0x2b8e0012 accept
        iifname "to-sbx" meta mark 0x2b8e0005 ct mark set 0x2b8e0013
        iifname "to-sbx" meta l4proto tcp reject with tcp reset
        iifname "to-sbx" reject with icmpx type admin-prohibited
    }
    chain sbx_snat {
        type nat hook postrouting priority srcnat; policy accept;
        oifname "to-host" ip saddr 169.254.0.21 snat ip to 10.200.0.2
    }
}
"""


def egress(policy: EgressPolicy, context: EgressContext = CONTEXT) -> SlotEgress:
    return SlotEgress("corral", "to-host", "to-sbx", "10.200.0.2", policy, context)


def classify_lines(text: str) -> list[str]:
    body = text.split("chain sbx_classify {")[1].split("}\n    chain")[0]
    return [line.strip() for line in body.strip().splitlines()[1:]]


def test_golden_project_mode_with_address_name_and_deny_rules() -> None:
    policy = EgressPolicy.build(
        "project",
        ["198.51.100.0/24:80-90/tcp", "api.example.com", "203.0.113.9/udp"],
        ["10.5.0.2:5432"],
    )
    assert egress(policy).render() == GOLDEN_PROJECT_WITH_RULES.replace("@BLOCKED@", BLOCKED)


BLOCKED = (
    "ip daddr { 0.0.0.0/8, 10.0.0.0/8, 100.64.0.0/10, 127.0.0.0/8, 169.254.0.0/16, 172.16.0.0/12,"
    " 192.0.0.0/24, 192.0.2.1/32, 192.168.0.0/16, 224.0.0.0/3 } return"
)
HEAD = [
    'iifname != "to-sbx" return',
    "ct direction reply return",
    "meta nfproto ipv6 drop",
    "ip daddr 169.254.0.22 meta l4proto { tcp, udp } th dport 53 meta mark set 0x2b8e0001 return",
    "ip daddr 169.254.0.22 return",
]
PROJECT = "ip daddr 10.5.0.2 meta l4proto tcp th dport 5432 meta mark set 0x2b8e0001 return"


@pytest.mark.parametrize(
    ("mode", "tail"),
    [
        ("project_internet", [PROJECT, BLOCKED, "meta mark set 0x2b8e0001"]),
        ("internet", [BLOCKED, "meta mark set 0x2b8e0001"]),
        ("project", [PROJECT, BLOCKED]),
        ("airgapped", [BLOCKED]),
    ],
)
def test_golden_modes(mode: str, tail: list[str]) -> None:
    assert classify_lines(egress(EgressPolicy.build(mode)).render()) == HEAD + tail


def test_host_names_send_web_ports_to_the_first_flight_judge_after_the_blocked_ranges() -> None:
    """Decided flows go by their conntrack mark; the rest is marked for the judge's queue."""
    lines = classify_lines(egress(EgressPolicy.build("internet", [], ["*.ads.example"])).render())
    assert lines[-6:] == [
        BLOCKED,
        "tcp dport { 80, 443 } ct mark 0x2b8e0011 meta mark set 0x2b8e0001 return",
        "tcp dport { 80, 443 } ct mark 0x2b8e0014 meta mark set 0x2b8e0002 return",
        "tcp dport { 80, 443 } ct mark 0x2b8e0013 return",
        "tcp dport { 80, 443 } meta mark set 0x2b8f0001 return",
        "meta mark set 0x2b8e0001",
    ]


def test_rule_order_deny_then_allow_then_project_then_blocked() -> None:
    policy = EgressPolicy.build("project", ["10.9.0.0/16", "project:5432/udp"], ["10.9.1.0/24/tcp"])
    assert classify_lines(egress(policy).render())[len(HEAD) :] == [
        "ip daddr 10.9.1.0/24 meta l4proto tcp return",
        "ip daddr 10.9.0.0/16 meta mark set 0x2b8e0001 return",
        PROJECT,
        BLOCKED,
    ]


def test_the_slot_subnet_and_host_addresses_merge_into_the_blocked_set() -> None:
    context = EgressContext("198.19.0.0/24", ("198.19.0.1", "203.0.113.5"))
    assert context.blocked()[-3:] == ["198.19.0.0/24", "203.0.113.5/32", "224.0.0.0/3"]
    assert context.is_blocked("169.254.169.254")
    assert context.is_blocked("198.19.0.9")
    assert not context.is_blocked("198.18.0.2")


def test_slot_rules_accept_only_what_the_egress_table_marked() -> None:
    text = SlotRules("corral", "to-host", "to-sbx", "10.200.0.2").render()
    assert text.count("meta mark & 0xffff0000 == 0x2b8e0000 accept") == 2


def test_host_rules_without_uplinks_are_unchanged_and_with_them_masquerade() -> None:
    plain = HostRules("corral", "corral-*").render()
    assert "masquerade" not in plain and "oifname {" not in plain
    text = HostRules("corral", "corral-*", egress_uplinks=("eth0", "ens5")).render()
    assert (
        'iifname "corral-*" oifname { "eth0", "ens5" } meta nfproto ipv4'
        " ct state new,established accept"
    ) in text
    assert 'iifname { "eth0", "ens5" } oifname "corral-*" ct state established,related accept' in (
        text
    )
    assert 'iifname "corral-*" oifname { "eth0", "ens5" } masquerade' in text
    # The drops stay after the accepts.
    forward = text.split("chain forward {")[1]
    assert forward.index("new,established accept") < forward.index('iifname "corral-*" drop')
    with pytest.raises(ValueError):
        HostRules("corral", "corral-*", egress_uplinks=('eth0" accept',)).render()


def test_names_that_would_inject_syntax_are_refused() -> None:
    policy = EgressPolicy.build("airgapped")
    with pytest.raises(ValueError):
        SlotEgress("t; flush ruleset", "a", "b", "10.0.0.2", policy).render()
    with pytest.raises(ValueError):
        SlotEgress("t", 'a" accept', "b", "10.0.0.2", policy).render()
    with pytest.raises(ValueError):
        SlotEgress("t", "a", "b", "10.0.0.2 accept", policy).render()


@pytest.mark.parametrize(
    ("mode", "allow", "deny", "flow", "forwarded"),
    [
        ("internet", (), (), ("198.51.100.1", 443, "tcp"), True),
        ("internet", (), (), ("198.51.100.1", None, None), True),  # ICMP
        ("internet", (), (), ("10.1.2.3", 443, "tcp"), False),  # private: always blocked
        ("internet", (), (), ("192.0.2.1", 22, "tcp"), False),  # the host's address
        ("internet", (), (), ("10.200.0.6", 80, "tcp"), False),  # another slot
        ("internet", (), (), ("10.5.0.2", 5432, "tcp"), False),  # project, not in this mode
        ("project_internet", (), (), ("10.5.0.2", 5432, "tcp"), True),
        ("project", (), (), ("10.5.0.2", 5432, "udp"), False),  # the service is TCP
        ("project", (), (), ("198.51.100.1", 443, "tcp"), False),
        ("airgapped", ("10.1.0.0/16:5000-5010/udp",), (), ("10.1.9.9", 5005, "udp"), True),
        ("airgapped", ("10.1.0.0/16:5000-5010/udp",), (), ("10.1.9.9", 5005, "tcp"), False),
        ("airgapped", ("10.1.0.0/16",), (), ("10.1.9.9", None, None), True),
        ("airgapped", ("10.1.0.0/16:53",), (), ("10.1.9.9", None, None), False),
        ("internet", (), ("198.51.100.0/24:443",), ("198.51.100.1", 443, "udp"), False),
        ("internet", ("198.51.100.1",), ("198.51.100.0/24",), ("198.51.100.1", 80, "tcp"), False),
        ("internet", (), ("project",), ("10.5.0.2", 5432, "tcp"), False),
        # Host-name rules send TCP 80/443 to the proxy: such flows are not forwarded ...
        ("internet", ("api.example.com",), (), ("198.51.100.1", 443, "tcp"), False),
        ("internet", ("api.example.com",), (), ("198.51.100.1", 22, "tcp"), True),
        # ... unless an address rule allows them first.
        (
            "airgapped",
            ("api.example.com", "198.51.100.1:443"),
            (),
            ("198.51.100.1", 443, "tcp"),
            True,
        ),
    ],
)
def test_the_python_mirror_of_the_classify_chain(
    mode: str,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    flow: tuple[str, int | None, str | None],
    forwarded: bool,
) -> None:
    from corral.network.egress import allows_forward

    policy = EgressPolicy.build(mode, list(allow), list(deny))
    assert allows_forward(policy, CONTEXT, *flow) is forwarded


def test_a_brokered_sandbox_sends_tls_to_the_proxy() -> None:
    """With brokered secrets (``intercept``) TCP 443 goes to the proxy, where the broker can
    claim the connections to its secrets' hosts; port 80 is never brokered."""
    from dataclasses import replace

    from corral.network.egress import allows_forward

    policy = EgressPolicy.build("internet", [], [])
    lines = classify_lines(replace(egress(policy), intercept=True).render())
    assert lines[-3:] == [
        BLOCKED,
        "tcp dport { 443 } meta mark set 0x2b8e0002 return",
        "meta mark set 0x2b8e0001",
    ]
    assert allows_forward(policy, CONTEXT, "198.51.100.1", 443, "tcp") is True
    assert allows_forward(policy, CONTEXT, "198.51.100.1", 443, "tcp", True) is False
    assert allows_forward(policy, CONTEXT, "198.51.100.1", 80, "tcp", True) is True
    # With host-name rules, port 80 goes to the first-flight judge and TLS still to the proxy.
    named = EgressPolicy.build("internet", ["api.example.com"], [])
    rendered = replace(egress(named), intercept=True).render()
    assert "tcp dport { 80 } meta mark set 0x2b8f0001 return" in rendered
    assert "tcp dport { 443 } meta mark set 0x2b8e0002 return" in rendered


def test_a_sandbox_service_goes_to_the_proxy_never_forwarded() -> None:
    """A port of another sandbox has a virtual address nothing routes: the classify chain sends
    it to the proxy (which forwards it) in the project modes, and a deny still wins."""
    from corral.network.egress import allows_forward, reaches_service

    api = ProjectService("api", "169.254.100.1", (8080,))
    context = EgressContext("10.200.0.0/16", ("192.0.2.1",), (*CONTEXT.services, api))
    policy = EgressPolicy.build("project", [], [])
    lines = classify_lines(egress(policy, context).render())
    assert (
        "ip daddr 169.254.100.1 meta l4proto tcp th dport 8080 meta mark set 0x2b8e0002 return"
        in lines
    )
    assert "ip daddr 10.5.0.2 meta l4proto tcp th dport 5432 meta mark set 0x2b8e0001 return" in (
        lines
    )
    assert not allows_forward(policy, context, "169.254.100.1", 8080, "tcp")
    assert reaches_service(policy, context, "169.254.100.1", 8080)
    assert not reaches_service(policy, context, "169.254.100.1", 8081)
    assert reaches_service(EgressPolicy.build("airgapped", ["project:8080"], []), context,
                           "169.254.100.1", 8080)  # fmt: skip
    unreachable: tuple[tuple[str, list[str], list[str]], ...] = (
        ("internet", [], []),
        ("airgapped", [], []),
        ("project", [], ["project:8080"]),
        ("project", [], ["169.254.0.0/16"]),
    )
    for mode, allow, deny in unreachable:
        assert not reaches_service(
            EgressPolicy.build(mode, allow, deny), context, "169.254.100.1", 8080
        ), (mode, deny)


def test_a_new_table_is_created_without_deleting_anything_and_otherwise_the_same() -> None:
    """A fresh slot's egress is made by a transaction that fails whole if the table exists
    (``create``), and deletes nothing; its chains are those of the replacing text."""
    rules = egress(EgressPolicy.build("project_internet", ["10.1.0.0/16"], []))
    replacing, new = rules.render(), rules.render(new=True)
    assert replacing.startswith("add table inet corral_egress\ndelete table inet corral_egress\n")
    assert new.startswith("create table inet corral_egress\n")
    assert "delete" not in new
    assert new.split("\n", 1)[1] == replacing.split("\n", 2)[2]
