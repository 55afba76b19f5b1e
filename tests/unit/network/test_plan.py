"""Pure parts of the real network: slot naming and addressing, rendered rulesets, exports."""

from __future__ import annotations

import pytest

import corral.network
from corral.network import NetworkFailure
from corral.network.firewall import HostRules, SlotRules
from corral.network.slot_plan import SlotPlan


def test_exports() -> None:
    assert set(corral.network.__all__) == {
        "INNER_ADDRESS",
        "INNER_GATEWAY",
        "INNER_PREFIX",
        "FakeNetwork",
        "FirewallError",
        "Network",
        "NetworkFailure",
        "NoFreeSlot",
        "Slot",
        "SlotNetwork",
        "Traffic",
    }
    for name in corral.network.__all__:
        assert getattr(corral.network, name) is not None


def test_slot_n_gets_the_nth_slash_30() -> None:
    plan = SlotPlan("corral", "10.200.0.0/16")
    assert plan.capacity == 16384
    first, later = plan.layout(0), plan.layout(70)
    assert (first.host_side_address, first.slot_address) == ("10.200.0.1", "10.200.0.2")
    assert (later.host_side_address, later.slot_address) == ("10.200.1.25", "10.200.1.26")
    assert later.slot_ns == "corral-slot-70"
    assert later.sandbox_ns == "corral-sbx-70"
    assert later.sandbox_ns_path == "/run/netns/corral-sbx-70"
    with pytest.raises(NetworkFailure):
        plan.layout(16384)


@pytest.mark.parametrize("prefix", ["corral", "ct1a2b3c", "averyveryverylongprefix"])
def test_veth_names_fit_ifnamsiz_and_map_back(prefix: str) -> None:
    plan = SlotPlan(prefix, "10.200.0.0/16")
    name = plan.layout(plan.capacity - 1).host_veth
    assert len(name) <= 15
    assert plan.index_of_veth(name) == plan.capacity - 1
    assert plan.index_of_netns(f"{prefix}-slot-12") == 12
    assert plan.index_of_netns(f"{prefix}-sbx-3") == 3
    assert plan.index_of_netns(f"{prefix}x-sbx-3") is None


def test_other_prefixes_names_are_not_ours() -> None:
    plan = SlotPlan("corral", "10.200.0.0/16")
    other = SlotPlan("corral2", "10.200.0.0/16")
    assert plan.index_of_veth(other.layout(5).host_veth) is None
    assert plan.index_of_netns("corral2-slot-5") is None


@pytest.mark.parametrize("prefix", ["Corral", "cor-ral", "", "1abc"])
def test_bad_prefixes_are_refused(prefix: str) -> None:
    with pytest.raises(ValueError):
        SlotPlan(prefix, "10.200.0.0/16")


def test_subnets_must_be_ipv4_and_hold_a_slot() -> None:
    with pytest.raises(ValueError):
        SlotPlan("corral", "fd00::/64")
    with pytest.raises(ValueError):
        SlotPlan("corral", "10.0.0.0/31")


def test_slot_rules_translate_and_isolate() -> None:
    text = SlotRules(
        table="corral", uplink="to-host", downlink="to-sbx", host_address="10.200.0.2"
    ).render()
    assert "delete table inet corral" in text
    assert 'iifname "to-host" ip daddr 10.200.0.2 dnat ip to 169.254.0.21' in text
    assert "type filter hook forward priority filter; policy drop;" in text
    # nft 1.0.6 rejects these as chain names
    assert "chain fwd" not in text
    assert "chain egress" not in text


def test_rules_refuse_names_that_would_inject_syntax() -> None:
    with pytest.raises(ValueError):
        HostRules(table="corral; flush ruleset", veth_pattern="corral-*").render()
    with pytest.raises(ValueError):
        SlotRules(table="t", uplink='a" accept', downlink="b", host_address="10.0.0.2").render()
    with pytest.raises(ValueError):
        SlotRules(table="t", uplink="a", downlink="b", host_address="10.0.0.2 accept").render()


def test_host_rules_let_only_root_open_connections_into_the_slots() -> None:
    text = HostRules(table="corral", veth_pattern="corral-*", subnet="10.200.0.0/16").render()
    output = text.split("chain output {", 1)[1]
    for match in ('oifname "corral-*"', "ip daddr 10.200.0.0/16"):
        assert f"{match} ct state established,related accept" in output
        assert f"{match} meta skuid 0 accept" in output
        assert f"{match} meta l4proto tcp reject with tcp reset" in output
        assert f"{match} reject" in output
    forward = text.split("chain forward {", 1)[1].split("}", 1)[0]
    assert "ip daddr 10.200.0.0/16 drop" in forward
    with pytest.raises(ValueError):
        HostRules(table="t", veth_pattern="t-*", subnet="10.0.0.0/16 accept").render()


def test_slot_rules_count_the_sandbox_link_but_not_the_control_channel() -> None:
    text = SlotRules(
        table="corral", uplink="to-host", downlink="to-sbx", host_address="10.200.0.2"
    ).render()
    assert "counter sandbox_rx {" in text and "counter sandbox_tx {" in text

    def chain(name: str) -> list[str]:
        body = text.split(f"chain {name} {{", 1)[1].split("}", 1)[0]
        return [line.strip() for line in body.strip().splitlines()]

    sent, received = chain("count_sent"), chain("count_received")
    # Counted where the sandbox's link is, before any NAT, after conntrack; the control channel
    # (connections the host opened to the agent's port) returns before the count.
    assert sent == [
        "type filter hook prerouting priority mangle; policy accept;",
        'iifname "to-sbx" ct status dnat tcp sport 49983 ct direction reply return',
        'iifname "to-sbx" counter name "sandbox_tx"',
    ]
    assert received == [
        "type filter hook postrouting priority mangle; policy accept;",
        'oifname "to-sbx" ct status dnat tcp dport 49983 ct direction original return',
        'oifname "to-sbx" counter name "sandbox_rx"',
    ]


def test_the_control_port_left_out_is_the_agents() -> None:
    from corral.agent import AGENT_PORT
    from corral.network.base import CONTROL_PORT

    assert CONTROL_PORT == AGENT_PORT
