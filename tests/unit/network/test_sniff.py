"""Names from first flights: SNI from real ClientHellos (made by ssl), Host from HTTP heads."""

from __future__ import annotations

import ssl

import pytest

from corral.network.sniff import MAX_HEAD, http_host, is_tls, need_more, tls_server_name


def client_hello(name: str | None) -> bytes:
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    if name is None:
        context.check_hostname = False
        tls = context.wrap_bio(incoming, outgoing, server_hostname=None)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_sni_of_a_real_client_hello() -> None:
    hello = client_hello("api.github.com")
    assert is_tls(hello)
    assert not need_more(hello)
    assert tls_server_name(hello) == "api.github.com"


def test_a_hello_without_sni_or_cut_short_gives_no_name() -> None:
    assert tls_server_name(client_hello(None)) is None
    hello = client_hello("api.github.com")
    for cut in (1, 5, 20, len(hello) // 2, len(hello) - 1):
        assert need_more(hello[:cut])
        assert tls_server_name(hello[:cut]) is None


def test_a_hello_split_over_two_records_is_reassembled() -> None:
    hello = client_hello("files.pythonhosted.org")
    body = hello[5:]
    first, second = body[:100], body[100:]
    split = (
        b"\x16\x03\x01"
        + len(first).to_bytes(2, "big")
        + first
        + b"\x16\x03\x01"
        + len(second).to_bytes(2, "big")
        + second
    )
    assert not need_more(split)
    assert tls_server_name(split) == "files.pythonhosted.org"


def test_garbage_never_raises() -> None:
    hello = client_hello("example.com")
    for index in range(5, min(len(hello), 200)):
        mangled = bytearray(hello)
        mangled[index] ^= 0xFF
        name = tls_server_name(bytes(mangled))
        assert name is None or isinstance(name, str)
    assert tls_server_name(b"\x16\x03\x01\xff\xff" + b"\x01" * 100) is None
    assert tls_server_name(b"") is None


def test_a_head_stops_growing_at_the_bound() -> None:
    assert not need_more(b"G" * MAX_HEAD)
    assert need_more(b"GET / HTTP/1.1\r\nHost: a\r\n")


@pytest.mark.parametrize(
    ("head", "name"),
    [
        (b"GET / HTTP/1.1\r\nHost: api.github.com\r\n\r\n", "api.github.com"),
        (b"GET / HTTP/1.1\r\nhost:Example.COM:8080\r\nAccept: */*\r\n\r\n", "example.com"),
        (b"POST /x HTTP/1.0\r\nUser-Agent: y\r\nHOST: a.b\r\n\r\nbody", "a.b"),
        (b"GET / HTTP/1.1\r\n\r\n", None),  # no Host
        (b"GET / HTTP/1.1\r\nHost: a.com\r\nHost: b.com\r\n\r\n", None),  # two: refused
        (b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", None),
        (b"GET / HTTP/1.1\r\nHost: a.com:x\r\n\r\n", None),
        (b"GET / HTTP/1.1\r\nHost: a..com\r\n\r\n", None),
        (b"GET / HTTP/1.1\r\nHost: a.com\r\n", None),  # incomplete head
        (b"nonsense\r\nHost: a.com\r\n\r\n", None),
        (b"GET / HTTP/1.1\r\nX-Host: a.com\r\n\r\n", None),
    ],
)
def test_http_host(head: bytes, name: str | None) -> None:
    assert http_host(head) == name
