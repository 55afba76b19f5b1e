"""The broker's TLS path on loopback: a real upstream behind its own CA, a client that trusts
the workspace CA. The upstream gets the value; an untrusted upstream is never talked to."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.network.broker import CertificateAuthority
from corral.network.broker.injection import Injection
from corral.network.broker.intercept import Broker
from tests.broker_lab import Upstream, make_test_ca, request, sandbox_connection

PH = b"corral-ph-00112233445566778899aabbccddeeff"
REAL = b"the-real-token"


class Source:
    def __init__(self) -> None:
        self.items: tuple[Injection, ...] = (Injection("TOKEN", PH, REAL, ("api.test",)),)
        self.audit: list[tuple[str, str, str, str, str]] = []

    def injections(self, sandbox_id: str) -> tuple[Injection, ...]:
        return self.items

    def used(self, sandbox_id: str, secret: str, host: str, method: str, path: str) -> None:
        self.audit.append((sandbox_id, secret, host, method, path))


async def test_intercepted_requests_reach_upstream_with_the_value(tmp_path: Path) -> None:
    upstream_ca, server_pem = make_test_ca(tmp_path, ["api.test"])
    upstream = Upstream(server_pem)
    await upstream.start()
    authority = CertificateAuthority(tmp_path / "broker")
    source = Source()
    broker = Broker(authority, source, upstream_ca=upstream_ca)
    trust = tmp_path / "sandbox-trust.pem"
    trust.write_bytes(authority.certificate_pem())

    async def serve(client, up, head):  # type: ignore[no-untyped-def]
        await broker.serve("sb-1", "api.test", client, up, head)

    try:
        async with sandbox_connection(serve, "api.test", trust, upstream.port) as (reader, writer):
            for path in (b"/one", b"/two"):  # one kept-alive connection, two requests
                answer = await request(
                    reader,
                    writer,
                    b"GET " + path + b" HTTP/1.1\r\nHost: api.test\r\n"
                    b"Authorization: Bearer " + PH + b"\r\n\r\n",
                )
                assert answer.startswith(b"HTTP/1.1 200")
            source.items = ()  # revoked: the next request on the same connection keeps it
            await request(
                reader, writer, b"GET /three HTTP/1.1\r\nHost: api.test\r\nX-K: " + PH + b"\r\n\r\n"
            )
        assert [REAL in h for h in upstream.heads] == [True, True, False]
        assert PH in upstream.heads[2]
        assert source.audit == [
            ("sb-1", "TOKEN", "api.test", "GET", "/one"),
            ("sb-1", "TOKEN", "api.test", "GET", "/two"),
        ]
    finally:
        await upstream.stop()


async def test_an_upstream_the_host_does_not_trust_gets_nothing(tmp_path: Path) -> None:
    _, server_pem = make_test_ca(tmp_path, ["api.test"])
    upstream = Upstream(server_pem)
    await upstream.start()
    authority = CertificateAuthority(tmp_path / "broker")
    (tmp_path / "other").mkdir()
    other_ca, _ = make_test_ca(tmp_path / "other", ["api.test"])
    broker = Broker(authority, Source(), upstream_ca=other_ca)
    trust = tmp_path / "sandbox-trust.pem"
    trust.write_bytes(authority.certificate_pem())
    failures: list[BaseException] = []

    async def serve(client, up, head):  # type: ignore[no-untyped-def]
        try:
            await broker.serve("sb-1", "api.test", client, up, head)
        except Exception as exc:
            failures.append(exc)
            client.close()

    try:
        with pytest.raises((ConnectionError, OSError)):
            async with sandbox_connection(serve, "api.test", trust, upstream.port) as (r, w):
                await request(r, w, b"GET / HTTP/1.1\r\nHost: api.test\r\nX-K: " + PH + b"\r\n\r\n")
        assert failures and "CERTIFICATE_VERIFY_FAILED" in str(failures[0])
        assert upstream.heads == []
    finally:
        await upstream.stop()
