"""The sandbox resolver's answers (with a fake upstream), its record of answers, and the
proxy's decision that rests on that record."""

from __future__ import annotations

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from corral.network.egress import EgressContext
from corral.network.egress_decision import decide
from corral.network.policy import EgressPolicy, ProjectService
from corral.network.resolver import SandboxResolver, read_resolv_conf
from corral.network.sandbox_egress import ResolvedNames, SandboxEgress

SERVICE = ProjectService("db.project", "10.5.0.2", (5432,))
ZONE = {
    "api.example.com": ["198.51.100.7", "198.51.100.8"],
    "meta.example.com": ["169.254.169.254"],
}


class FakeUpstream:
    def __init__(self, truncate: bool = False) -> None:
        self.asked: list[tuple[str, str, bool]] = []
        self.truncate = truncate

    async def __call__(self, wire: bytes, tcp: bool) -> bytes:
        query = dns.message.from_wire(wire)
        question = query.question[0]
        name = question.name.to_text(omit_final_dot=True)
        self.asked.append((name, dns.rdatatype.to_text(question.rdtype), tcp))
        response = dns.message.make_response(query)
        if name == "cdn-alias.example.com":
            response.answer.append(
                dns.rrset.from_text(question.name, 600, "IN", "CNAME", "edge.cdn.example.net.")
            )
            response.answer.append(
                dns.rrset.from_text("edge.cdn.example.net.", 20, "IN", "A", "203.0.113.50")
            )
            response.answer.append(
                dns.rrset.from_text("edge.cdn.example.net.", 20, "IN", "AAAA", "2001:db8::5")
            )
        elif name in ZONE:
            response.answer.append(dns.rrset.from_text(question.name, 300, "IN", "A", *ZONE[name]))
        else:
            response.set_rcode(dns.rcode.NXDOMAIN)
        if self.truncate and not tcp:
            response.answer = []
            response.flags |= dns.flags.TC
        return response.to_wire()


def sandbox(
    mode: str = "project", allow: tuple[str, ...] = (), deny: tuple[str, ...] = ()
) -> SandboxEgress:
    policy = EgressPolicy.build(mode, list(allow), list(deny))
    return SandboxEgress("sbx1", "ns", policy, EgressContext("10.200.0.0/16", (), (SERVICE,)))


async def ask(
    box: SandboxEgress, name: str, rdtype: str = "A", upstream: FakeUpstream | None = None
) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype)
    wire = await SandboxResolver([]).answer(box, query.to_wire(), upstream or FakeUpstream())
    answer = dns.message.from_wire(wire)
    assert answer.id == query.id
    return answer


def addresses(answer: dns.message.Message) -> list[str]:
    return sorted(
        r.to_text() for rrset in answer.answer if rrset.rdtype == dns.rdatatype.A for r in rrset
    )


async def test_allowed_names_are_forwarded_and_recorded() -> None:
    box = sandbox(allow=("api.example.com",))
    upstream = FakeUpstream()
    answer = await ask(box, "api.example.com", upstream=upstream)
    assert answer.rcode() == dns.rcode.NOERROR
    assert addresses(answer) == ["198.51.100.7", "198.51.100.8"]
    assert upstream.asked == [("api.example.com", "A", False)]
    assert box.names.addresses("api.example.com") == {"198.51.100.7", "198.51.100.8"}


async def test_other_names_are_refused_without_asking_upstream() -> None:
    box = sandbox(allow=("api.example.com",))
    upstream = FakeUpstream()
    for name in ("other.example.com", "x.api.example.com"):
        assert (await ask(box, name, upstream=upstream)).rcode() == dns.rcode.REFUSED
    assert upstream.asked == []
    denied = sandbox("internet", deny=("*.example.com",))
    assert (await ask(denied, "api.example.com", upstream=upstream)).rcode() == dns.rcode.REFUSED
    assert (await ask(denied, "elsewhere.org", upstream=upstream)).rcode() == dns.rcode.NXDOMAIN


async def test_aaaa_is_answered_empty_and_aaaa_records_are_stripped() -> None:
    box = sandbox(allow=("api.example.com", "cdn-alias.example.com"))
    upstream = FakeUpstream()
    answer = await ask(box, "api.example.com", "AAAA", upstream=upstream)
    assert answer.rcode() == dns.rcode.NOERROR and answer.answer == []
    assert upstream.asked == []
    answer = await ask(box, "cdn-alias.example.com", upstream=upstream)
    assert [dns.rdatatype.to_text(r.rdtype) for r in answer.answer] == ["CNAME", "A"]
    # The chain's addresses are recorded under the name asked for, with the smallest TTL.
    assert box.names.answered("cdn-alias.example.com", "203.0.113.50")
    assert not box.names.answered("edge.cdn.example.net", "203.0.113.50")


async def test_project_names_are_answered_locally() -> None:
    box = sandbox("project")
    upstream = FakeUpstream()
    answer = await ask(box, "DB.Project", upstream=upstream)
    assert addresses(answer) == ["10.5.0.2"]
    assert upstream.asked == []
    assert (await ask(sandbox("airgapped"), "db.project", upstream=upstream)).rcode() == (
        dns.rcode.REFUSED
    )


async def test_truncated_upstream_answers_are_retried_over_tcp() -> None:
    box = sandbox(allow=("api.example.com",))
    upstream = FakeUpstream(truncate=True)
    answer = await ask(box, "api.example.com", upstream=upstream)
    assert addresses(answer) == ["198.51.100.7", "198.51.100.8"]
    assert [tcp for *_, tcp in upstream.asked] == [False, True]


async def test_upstream_failure_is_servfail() -> None:
    async def broken(wire: bytes, tcp: bool) -> bytes:
        raise OSError("unreachable")

    box = sandbox(allow=("api.example.com",))
    query = dns.message.make_query("api.example.com", "A")
    wire = await SandboxResolver([]).answer(box, query.to_wire(), broken)
    assert dns.message.from_wire(wire).rcode() == dns.rcode.SERVFAIL


async def test_an_upstream_answer_for_another_question_is_not_trusted() -> None:
    async def liar(wire: bytes, tcp: bool) -> bytes:
        other = dns.message.make_query("api.example.com", "A")
        response = dns.message.make_response(other)
        response.answer.append(
            dns.rrset.from_text("api.example.com.", 300, "IN", "A", "192.0.2.66")
        )
        return response.to_wire()

    box = sandbox(allow=("api.example.com",))
    query = dns.message.make_query("api.example.com", "A")
    wire = await SandboxResolver([]).answer(box, query.to_wire(), liar)
    assert dns.message.from_wire(wire).rcode() == dns.rcode.SERVFAIL
    assert box.names.addresses("api.example.com") == set()


async def test_malformed_queries() -> None:
    box = sandbox(allow=("api.example.com",))
    resolver = SandboxResolver([])
    reply = await resolver.answer(box, b"\x12\x34garbage", FakeUpstream())
    assert reply[:2] == b"\x12\x34" and reply[3] & 0x0F == dns.rcode.FORMERR
    response = dns.message.make_response(dns.message.make_query("api.example.com", "A"))
    assert await resolver.answer(box, response.to_wire(), FakeUpstream()) == b""
    axfr = await ask(box, "api.example.com", "AXFR")
    assert axfr.rcode() == dns.rcode.REFUSED


def test_read_resolv_conf(tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "resolv.conf"
    conf.write_text(
        "# comment\nnameserver 192.0.2.53\nnameserver ::1\nsearch x\n"
        "nameserver 192.0.2.54\nnameserver 192.0.2.55\nnameserver 192.0.2.56\n"
    )
    assert read_resolv_conf(str(conf)) == ["192.0.2.53", "192.0.2.54", "192.0.2.55"]
    assert read_resolv_conf(str(tmp_path / "missing")) == []


def test_resolved_names_expire_and_stay_bounded() -> None:
    now = [1000.0]
    names = ResolvedNames(clock=lambda: now[0], max_names=2, max_addresses=2, min_ttl=30)
    names.record("A.example.", ["192.0.2.1"], 0)
    assert names.answered("a.example", "192.0.2.1")
    now[0] += 31
    assert not names.answered("a.example", "192.0.2.1")  # zero TTL kept for min_ttl only
    names.record("a.example", ["192.0.2.1", "192.0.2.2", "192.0.2.3"], 300)
    assert names.addresses("a.example") == {"192.0.2.2", "192.0.2.3"}
    names.record("b.example", ["192.0.2.4"], 300)
    names.record("c.example", ["192.0.2.5"], 300)
    assert names.addresses("a.example") == set()  # the oldest name went first
    assert names.answered("c.example", "192.0.2.5")


@pytest.mark.parametrize(
    ("mode", "allow", "deny", "name", "address", "port", "allowed"),
    [
        ("project", ("api.example.com",), (), "api.example.com", "198.51.100.7", 443, True),
        ("project", ("api.example.com",), (), "api.example.com", "198.51.100.9", 443, False),
        ("project", ("api.example.com",), (), "other.example.com", "198.51.100.7", 443, False),
        ("project", ("api.example.com",), (), None, "198.51.100.7", 443, False),
        (
            "project",
            ("*.example.com",),
            ("api.example.com",),
            "api.example.com",
            "198.51.100.7",
            443,
            False,
        ),
        ("internet", (), ("*.ads.example",), "x.ads.example", "198.51.100.7", 443, False),
        ("internet", (), ("*.ads.example",), None, "198.51.100.7", 443, True),
        ("internet", (), ("*.ads.example",), None, "10.1.2.3", 443, False),
        # An allowed name that resolves into an always-blocked range (metadata) stays blocked,
        ("project", ("meta.example.com",), (), "meta.example.com", "169.254.169.254", 80, False),
        # unless an address rule names that range.
        (
            "project",
            ("meta.example.com", "169.254.169.254:80"),
            (),
            "meta.example.com",
            "169.254.169.254",
            80,
            True,
        ),
    ],
)
async def test_proxy_decision(
    mode: str,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    name: str | None,
    address: str,
    port: int,
    allowed: bool,
) -> None:
    box = sandbox(mode, allow, deny)
    for known, addrs in ZONE.items():
        box.names.record(known, addrs, 300)
    assert decide(box, name, address, port).allowed is allowed


def test_resolved_names_move_to_a_fork_or_a_restarted_daemon() -> None:
    now = [50.0]
    names = ResolvedNames(clock=lambda: now[0])
    names.record("api.example.com", ["198.51.100.7"], 300)
    names.record("old.example.com", ["198.51.100.9"], 0)
    now[0] += 60
    exported = names.export()
    assert exported == [("api.example.com", "198.51.100.7", 240.0)]
    later = [9000.0]
    fork = ResolvedNames(clock=lambda: later[0])
    fork.load([*exported, ("bad", "not-an-ip", 5), ("x.example", "192.0.2.1", "nan?"), (1, 2, 3)])  # type: ignore[list-item]
    assert fork.answered("api.example.com", "198.51.100.7")
    assert fork.export() == exported
    later[0] += 241
    assert not fork.answered("api.example.com", "198.51.100.7")
