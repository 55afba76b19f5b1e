"""The inbound proxy's reading of request heads: routes, credentials, refusals."""

from __future__ import annotations

import pytest

from corral.api.inbound.heads import BadHead, parse_head

SBX = "sb-abcdefgh1234"


def head(target: str, *headers: str) -> bytes:
    lines = [f"GET {target} HTTP/1.1", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_path_route_is_rewritten_and_credentials_removed() -> None:
    request = parse_head(
        head(
            f"/sandboxes/{SBX}/ports/8080/a/b?x=1&corral_token=T&y=2",
            "Host: 127.0.0.1:7070",
            "X-Corral-Token: H",
            "Cookie: a=1; corral_token=C; b=2; corral_session=S",
        ),
        frozenset(),
    )
    assert request is not None
    assert (request.sandbox_id, request.port, request.by_host) == (SBX, 8080, False)
    assert request.path == b"/a/b?x=1&y=2"
    assert request.token == "H" and not request.token_in_query
    names = [name.lower() for name, _ in request.headers]
    assert b"x-corral-token" not in names
    assert dict(request.headers)[b"Cookie"] == b"a=1; b=2"
    upstream = request.upstream_head("10.0.0.1")
    assert upstream.startswith(b"GET /a/b?x=1&y=2 HTTP/1.1\r\n")
    assert f"X-Forwarded-Prefix: /sandboxes/{SBX}/ports/8080".encode() in upstream


def test_host_route_and_the_ports_the_app_keeps() -> None:
    request = parse_head(head("/x?corral_token=Q", f"Host: 3000-{SBX}.example.com"), frozenset())
    assert request is not None
    assert (request.port, request.by_host, request.path) == (3000, True, b"/x")
    assert request.token == "Q" and request.token_in_query
    # E2B's envd port under the same scheme is the app's, and so is everything else.
    assert parse_head(head("/", f"Host: 49983-{SBX}.example.com"), frozenset({49983})) is None
    assert parse_head(head("/v1/sandboxes", "Host: 127.0.0.1"), frozenset()) is None
    assert parse_head(head("/sandboxes/sb-x/ports/80/", "Host: a"), frozenset()) is None


@pytest.mark.parametrize(
    "raw",
    [
        head(f"/sandboxes/{SBX}/ports/70000/", "Host: a"),
        head(
            f"/sandboxes/{SBX}/ports/80/",
            "Host: a",
            "Content-Length: 1",
            "Transfer-Encoding: chunked",
        ),
        head(f"/sandboxes/{SBX}/ports/80/", "Bad Header"),
        head(f"/sandboxes/{SBX}/ports/80/"),  # HTTP/1.1 without Host
    ],
)
def test_malformed_heads_are_refused(raw: bytes) -> None:
    with pytest.raises(BadHead) as refused:
        parse_head(raw, frozenset())
    assert refused.value.status == 400


def test_path_routed_answers_get_an_origin_of_their_own() -> None:
    from corral.api.inbound.heads import isolate_answer_head

    head = b"\r\n".join(
        [
            b"HTTP/1.1 200 OK",
            b"Content-Type: text/html",
            b"Connection: keep-alive",
            b"Service-Worker-Allowed: /",
            b"Set-Cookie: corral_session=forged; Path=/",
            b"Set-Cookie: theirs=1; Path=/",
        ]
    )
    lines = isolate_answer_head(head).split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 200 OK"
    assert b"Content-Type: text/html" in lines and b"Set-Cookie: theirs=1; Path=/" in lines
    assert not any(b"keep-alive" in x or b"Service-Worker" in x or b"forged" in x for x in lines)
    policy = next(x for x in lines if x.startswith(b"Content-Security-Policy: sandbox "))
    assert b"allow-scripts" in policy and b"allow-same-origin" not in policy
    assert lines[-1] == b"Connection: close"
    request = parse_head(head_of(f"/sandboxes/{SBX}/ports/8080/"), frozenset())
    assert request is not None and b"Connection: close" in request.upstream_head(None)


def head_of(target: str) -> bytes:
    return head(target, "Host: 127.0.0.1:7070", "Connection: keep-alive")
