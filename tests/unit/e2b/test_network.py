"""E2B's network options as corral egress policies: the mode switch, precedence, refusals."""

from __future__ import annotations

import pytest

from corral.e2b.network import create_egress, network_info, update_egress
from corral.network.policy import EgressPolicy
from corral.service.errors import InvalidRequest


def test_nothing_said_keeps_the_workspace_default() -> None:
    assert create_egress(None, None, "project_internet") is None
    assert create_egress(None, {}, "internet") is None


def test_no_internet_switches_only_the_internet_part_of_the_mode() -> None:
    assert create_egress(False, None, "project_internet").mode == "project"  # type: ignore[union-attr]
    assert create_egress(False, None, "internet").mode == "airgapped"  # type: ignore[union-attr]
    deny_all = create_egress(None, {"denyOut": ["0.0.0.0/0"]}, "internet")
    assert deny_all is not None and (deny_all.mode, deny_all.deny) == ("airgapped", [])
    assert create_egress(True, None, "project").mode == "project_internet"  # type: ignore[union-attr]


def test_allow_and_deny_lists_become_rules_in_both_spellings() -> None:
    camel = create_egress(
        None,
        {"allowOut": ["1.1.1.1", "api.example.com"], "denyOut": ["0.0.0.0/0"], "dnsServers": []},
        "internet",
    )
    snake = create_egress(
        None, {"allow_out": ["1.1.1.1", "api.example.com"], "deny_out": ["0.0.0.0/0"]}, "internet"
    )
    assert camel == snake
    assert camel is not None and camel.allow == ["1.1.1.1", "api.example.com"]
    only_deny = create_egress(None, {"denyOut": ["203.0.113.0/24"]}, "internet")
    assert only_deny is not None and (only_deny.mode, only_deny.deny) == (None, ["203.0.113.0/24"])
    dns = create_egress(None, {"dnsServers": ["9.9.9.9"]}, "internet")
    assert dns is not None and dns.allow == ["9.9.9.9:53"]


def test_an_allow_inside_a_deny_is_refused_not_mistranslated() -> None:
    with pytest.raises(InvalidRequest, match="in E2B the allow wins"):
        create_egress(None, {"allowOut": ["8.8.8.8"], "denyOut": ["8.8.8.0/24"]}, "internet")


@pytest.mark.parametrize(
    ("network", "named"),
    [
        ({"rules": {"a.com": [{"transform": {}}]}}, "network.rules"),
        ({"egressProxy": {"address": "p:1080"}}, "egress_proxy"),
        ({"maskRequestHost": "${PORT}-x.example"}, "mask_request_host"),
        ({"gpu": True}, "'gpu'"),
        ({"allowOut": "1.1.1.1"}, "list of strings"),
        ({"allowOut": ["not a rule!"]}, "not a rule!"),
        ({"dnsServers": ["dns.google"]}, "not an IPv4 address"),
    ],
)
def test_what_corral_cannot_honour_is_refused_by_name(network: object, named: str) -> None:
    with pytest.raises(InvalidRequest, match=named):
        create_egress(None, network, "internet")


def test_an_update_replaces_everything_and_turns_the_internet_back_on() -> None:
    current = EgressPolicy.build("project", ["1.1.1.1"], ["203.0.113.0/24"])
    cleared = update_egress({}, current)
    assert (cleared.mode, cleared.allow, cleared.deny) == ("project_internet", [], [])
    off = update_egress({"allow_internet_access": False, "allowOut": ["9.9.9.9"]}, current)
    assert (off.mode, off.allow) == ("project", ["9.9.9.9"])
    with pytest.raises(InvalidRequest):
        update_egress({"allow_internet_access": "no"}, current)


def test_info_shows_no_internet_as_deny_all() -> None:
    policy = EgressPolicy.build("airgapped", ["1.1.1.1"], ["203.0.113.0/24"])
    assert network_info(policy) == (
        False,
        {"allowOut": ["1.1.1.1"], "denyOut": ["0.0.0.0/0", "203.0.113.0/24"]},
    )
    assert network_info(EgressPolicy.build("internet"))[0] is True
