"""Read the name a connection asks for: SNI from a TLS ClientHello, ``Host`` from an HTTP head.

A small bounded hand parser, on purpose: the proxy needs one field of the first flight and must
not terminate TLS. The libraries that parse a ClientHello either terminate TLS (ssl), or come with
a large tree (mitmproxy, scapy) for one extension. Every length is checked against what was read;
anything malformed, truncated past ``MAX_HEAD`` or without the field gives ``None``.
"""

from __future__ import annotations

import re

__all__ = ["MAX_HEAD", "http_host", "is_tls", "need_more", "tls_server_name"]

MAX_HEAD = 16384
_HANDSHAKE = 0x16
_CLIENT_HELLO = 0x01
_SNI_EXTENSION = 0x0000
_HOST_NAME = 0x00


def is_tls(head: bytes) -> bool:
    return head[:1] == bytes([_HANDSHAKE])


def need_more(head: bytes) -> bool:
    """Whether the first flight is still incomplete (and may grow to at most ``MAX_HEAD``)."""
    if len(head) >= MAX_HEAD:
        return False
    if is_tls(head):
        hello = _handshake_bytes(head)
        if hello is None:
            return True
        return len(hello) < 4 or len(hello) < 4 + int.from_bytes(hello[1:4], "big")
    return b"\r\n\r\n" not in head


def tls_server_name(head: bytes) -> str | None:
    """The host_name of the SNI extension of the ClientHello at the start of ``head``."""
    hello = _handshake_bytes(head)
    if hello is None or len(hello) < 4 or hello[0] != _CLIENT_HELLO:
        return None
    length = int.from_bytes(hello[1:4], "big")
    body = hello[4 : 4 + length]
    if len(body) < length:
        return None
    try:
        return _sni_from_hello(body)
    except IndexError:
        return None


def http_host(head: bytes) -> str | None:
    """The ``Host`` header's name (without a port) of a complete HTTP/1 request head."""
    end = head.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = head[:end].split(b"\r\n")
    if len(lines[0].split(b" ")) != 3:
        return None
    found = [
        line.split(b":", 1)[1].strip(b" \t")
        for line in lines[1:]
        if line.split(b":", 1)[0].lower() == b"host" and b":" in line
    ]
    if len(found) != 1:  # none, or several (a smuggling attempt): refuse
        return None
    host = found[0].decode("ascii", "replace")
    if host.startswith("["):
        return None  # an IPv6 literal
    name, _, port = host.partition(":")
    if port and not port.isdigit():
        return None
    return _name(name)


def _handshake_bytes(head: bytes) -> bytes | None:
    """Concatenated payloads of the leading TLS handshake records (a ClientHello may span
    several records); None when the first record's header is incomplete or not a handshake."""
    out = bytearray()
    offset = 0
    while offset + 5 <= len(head):
        if head[offset] != _HANDSHAKE or head[offset + 1] != 0x03:
            return bytes(out) if out else None
        length = int.from_bytes(head[offset + 3 : offset + 5], "big")
        out += head[offset + 5 : offset + 5 + length]
        offset += 5 + length
    return bytes(out) if out or offset else None


def _sni_from_hello(body: bytes) -> str | None:
    pos = 2 + 32  # client_version, random
    pos += 1 + body[pos]  # session_id
    pos += 2 + int.from_bytes(body[pos : pos + 2], "big")  # cipher_suites
    pos += 1 + body[pos]  # compression_methods
    if pos + 2 > len(body):
        return None
    end = pos + 2 + int.from_bytes(body[pos : pos + 2], "big")
    pos += 2
    if end > len(body):
        return None
    names: list[str] = []
    while pos + 4 <= end:
        kind = int.from_bytes(body[pos : pos + 2], "big")
        size = int.from_bytes(body[pos + 2 : pos + 4], "big")
        data = body[pos + 4 : pos + 4 + size]
        if len(data) < size:
            return None
        if kind == _SNI_EXTENSION:
            names.append(_sni_list(data) or "")
        pos += 4 + size
    if len(names) != 1 or not names[0]:
        return None
    return names[0]


def _sni_list(data: bytes) -> str | None:
    total = int.from_bytes(data[0:2], "big")
    pos, end = 2, min(2 + total, len(data))
    found: list[str] = []
    while pos + 3 <= end:
        kind = data[pos]
        size = int.from_bytes(data[pos + 1 : pos + 3], "big")
        value = data[pos + 3 : pos + 3 + size]
        if kind == _HOST_NAME:
            name = _name(value.decode("ascii", "replace"))
            if name is None:
                return None
            found.append(name)
        pos += 3 + size
    return found[0] if len(found) == 1 else None


_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_.-]*[a-z0-9_])?$")


def _name(text: str) -> str | None:
    name = text.strip().rstrip(".").lower()
    if not _NAME.match(name) or ".." in name:
        return None
    return name
