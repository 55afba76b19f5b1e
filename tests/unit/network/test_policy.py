"""The egress policy model: rule parsing (and its errors), precedence helpers, JSON storage."""

from __future__ import annotations

import ipaddress

import pytest

from corral.network.policy import EgressPolicy, EgressRule, NetworkMode, PolicyError


@pytest.mark.parametrize(
    ("text", "kind", "network", "ports", "protocol", "host"),
    [
        ("10.1.0.0/16", "cidr", "10.1.0.0/16", None, None, None),
        ("192.0.2.7", "cidr", "192.0.2.7/32", None, None, None),
        ("192.0.2.7:443", "cidr", "192.0.2.7/32", (443, 443), None, None),
        ("203.0.113.0/24:8000-8100/udp", "cidr", "203.0.113.0/24", (8000, 8100), "udp", None),
        ("0.0.0.0/0/tcp", "cidr", "0.0.0.0/0", None, "tcp", None),
        ("project", "project", None, None, None, None),
        ("project:5432", "project", None, (5432, 5432), None, None),
        ("PROJECT:5000-5010/TCP", "project", None, (5000, 5010), "tcp", None),
        ("api.github.com", "host", None, None, None, "api.github.com"),
        ("*.pythonhosted.org", "host", None, None, None, "*.pythonhosted.org"),
        ("  Example.COM. ", "host", None, None, None, "example.com"),
    ],
)
def test_rules_parse(
    text: str,
    kind: str,
    network: str | None,
    ports: tuple[int, int] | None,
    protocol: str | None,
    host: str | None,
) -> None:
    rule = EgressRule.parse(text)
    assert rule.kind == kind
    assert rule.network == (ipaddress.IPv4Network(network) if network else None)
    assert rule.ports == ports
    assert rule.protocol == protocol
    assert rule.host == host
    assert EgressRule.parse(rule.text) == rule


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10.0.0.0/33", "is not an IPv4 network"),
        ("10.0.0.1/8", "did you mean 10.0.0.0/8"),
        ("300.1.2.3", "is not an IPv4 network"),
        ("10.0.0.1:0", "port 0 is out of range 1-65535"),
        ("10.0.0.1:70000", "port 70000 is out of range 1-65535"),
        ("10.0.0.1:5-3", "port range 5-3 is reversed"),
        ("10.0.0.1:", "missing port after ':'"),
        ("10.0.0.1:http", "port 'http' is not a number"),
        ("project:99999999", "is not a number from 1 to 65535"),
        ("*.", "'*.' needs a domain after it"),
        ("a..b", "empty label"),
        ("*.a..b", "empty label"),
        ("foo.*.com", "is not a host-name label"),
        ("-bad.example", "is not a host-name label"),
        ("under score!.com", "is not a host-name label"),
        ("api.github.com:443", "a host-name rule takes no port or protocol"),
        ("api.github.com/tcp", "a host-name rule takes no port or protocol"),
        ("::1", "IPv6 is blocked"),
        ("2001:db8::/32", "IPv6 is blocked"),
        ("[2001:db8::1]:443", "IPv6 is blocked"),
        ("fe80::1%eth0", "IPv6 is blocked"),
        ("", "empty rule"),
        ("a" * 400, "longer than 300 characters"),
        ("x" * 64 + ".com", "is not a host-name label"),
    ],
)
def test_bad_rules_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message.replace("*", r"\*").replace(".", r"\.")):
        EgressRule.parse(text)


def test_wildcards_cover_subdomains_only() -> None:
    rule = EgressRule.parse("*.pythonhosted.org")
    assert rule.matches_name("files.pythonhosted.org")
    assert rule.matches_name("a.b.pythonhosted.org.")
    assert not rule.matches_name("pythonhosted.org")
    assert not rule.matches_name("evilpythonhosted.org")
    exact = EgressRule.parse("api.github.com")
    assert exact.matches_name("API.GitHub.com")
    assert not exact.matches_name("x.api.github.com")


def test_modes() -> None:
    assert NetworkMode.parse(" Project_Internet ") is NetworkMode.PROJECT_INTERNET
    assert [m.internet for m in NetworkMode] == [True, True, False, False]
    assert [m.project for m in NetworkMode] == [True, False, True, False]
    with pytest.raises(PolicyError, match="unknown network mode 'open'"):
        NetworkMode.parse("open")
    assert EgressPolicy().mode is NetworkMode.PROJECT_INTERNET


def test_deny_wins_for_names() -> None:
    policy = EgressPolicy.build("project", ["*.example.com"], ["bad.example.com"])
    assert policy.name_allowed_by_rule("good.example.com")
    assert not policy.name_allowed_by_rule("bad.example.com")
    assert policy.resolves("good.example.com")
    assert not policy.resolves("bad.example.com")
    assert not policy.resolves("other.org")  # project mode: no internet names
    internet = EgressPolicy.build("internet", [], ["*.tracker.example"])
    assert internet.resolves("other.org")
    assert not internet.resolves("x.tracker.example")
    assert internet.has_host_rules


def test_reaches_project() -> None:
    assert EgressPolicy.build("project").reaches_project
    assert not EgressPolicy.build("internet").reaches_project
    assert EgressPolicy.build("airgapped", ["project:5432"]).reaches_project


def test_json_round_trip_is_canonical() -> None:
    policy = EgressPolicy.build(
        "project", ["api.github.com", "10.0.0.0/8:443/tcp", "project:5432"], ["10.1.2.3"]
    )
    data = policy.to_json()
    assert data == {
        "mode": "project",
        "allow": ["api.github.com", "10.0.0.0/8:443/tcp", "project:5432"],
        "deny": ["10.1.2.3"],
    }
    assert EgressPolicy.from_json(data) == policy
    assert EgressPolicy.loads(policy.dumps()) == policy


def test_duplicates_collapse() -> None:
    policy = EgressPolicy.build("airgapped", ["Example.com", "example.com."])
    assert [rule.text for rule in policy.allow] == ["example.com"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "is an object"),
        ({"mode": "project", "extra": 1}, "is an object"),
        ({"allow": "example.com"}, "are lists"),
        ({"allow": [1]}, "are strings"),
        ({"mode": 3}, "'mode' is a string"),
        ({"mode": "nope"}, "unknown network mode"),
        ({"allow": ["10.0.0.0/33"]}, "is not an IPv4 network"),
    ],
)
def test_stored_policies_are_checked(data: object, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        EgressPolicy.from_json(data)


def test_bounds() -> None:
    with pytest.raises(PolicyError, match="not JSON"):
        EgressPolicy.loads("{")
    with pytest.raises(PolicyError, match="at most 256"):
        EgressPolicy.build("project", [f"10.0.{i // 256}.{i % 256}" for i in range(257)])
    with pytest.raises(PolicyError, match="list of at most"):
        EgressPolicy.build("project", "example.com")
