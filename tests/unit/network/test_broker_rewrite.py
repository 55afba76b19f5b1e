"""The broker's request rewriter: where a placeholder becomes the value, and where it must not."""

from __future__ import annotations

import base64
import datetime
import hashlib

import httptools
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from corral.network.broker.injection import Injection
from corral.network.broker.rewrite import RequestRewriter, RewriteError
from tests.sigv4_verify import verify

PH = b"corral-ph-0123456789abcdef0123456789abcdef"
REAL = b"real-token-value"
HOST = "api.test"


def injection(**overrides: object) -> Injection:
    fields: dict[str, object] = {
        "secret": "TOKEN",
        "placeholder": PH,
        "value": REAL,
        "hosts": (HOST,),
    }
    fields.update(overrides)
    return Injection(**fields)  # type: ignore[arg-type]


def run(
    data: bytes, *injections: Injection, host: str = HOST, pieces: int = 1
) -> tuple[bytes, list[tuple[str, str, str]]]:
    used: list[tuple[str, str, str]] = []
    rewriter = RequestRewriter(
        host, lambda: injections, lambda inj, method, path: used.append((inj.secret, method, path))
    )
    out = b""
    size = max(1, len(data) // pieces)
    for start in range(0, len(data), size):
        out += rewriter.feed(data[start : start + size])
    return out, used


def parse(stream: bytes) -> list[tuple[bytes, dict[bytes, bytes], bytes]]:
    """The requests in ``stream`` as (target, headers lowercased, body)."""
    found: list[tuple[bytes, dict[bytes, bytes], bytes]] = []

    class Sink:
        def on_message_begin(self) -> None:
            self.url, self.body = b"", b""
            self.headers: dict[bytes, bytes] = {}

        def on_url(self, url: bytes) -> None:
            self.url += url

        def on_header(self, name: bytes, value: bytes) -> None:
            self.headers[name.lower()] = value

        def on_body(self, body: bytes) -> None:
            self.body += body

        def on_message_complete(self) -> None:
            found.append((self.url, self.headers, self.body))

    httptools.HttpRequestParser(Sink()).feed_data(stream)
    return found


def test_header_bearer_and_query_on_the_bound_host() -> None:
    request = (
        b"GET /user?token=" + PH + b"&x=1 HTTP/1.1\r\nHost: api.test\r\n"
        b"Authorization: Bearer " + PH + b"\r\nX-Other: keep\r\n\r\n"
    )
    out, used = run(request, injection(), pieces=7)
    ((target, headers, _),) = parse(out)
    assert target == b"/user?token=" + REAL + b"&x=1"
    assert headers[b"authorization"] == b"Bearer " + REAL
    assert headers[b"x-other"] == b"keep"
    assert used == [("TOKEN", "GET", "/user")]  # the audit never has the query


def test_basic_auth_is_decoded_and_reencoded() -> None:
    basic = base64.b64encode(b"x-access-token:" + PH)
    out, _ = run(
        b"GET /r.git/info/refs HTTP/1.1\r\nHost: api.test\r\nAuthorization: Basic "
        + basic
        + b"\r\n\r\n",
        injection(),
    )
    ((_, headers, _),) = parse(out)
    assert base64.b64decode(headers[b"authorization"][6:]) == b"x-access-token:" + REAL


@pytest.mark.parametrize(
    ("host_header", "sni"),
    [
        (b"evil.test", HOST),  # Host disagrees with the SNI
        (b"evil.test", "evil.test"),  # both name a host the secret is not bound to
        (b"api.test:443", "evil.test"),  # the SNI (the connection) is another name
    ],
)
def test_mismatched_or_unbound_host_gets_the_placeholder(host_header: bytes, sni: str) -> None:
    request = (
        b"GET /?t=" + PH + b" HTTP/1.1\r\nHost: " + host_header + b"\r\n"
        b"Authorization: Bearer " + PH + b"\r\n\r\n"
    )
    out, used = run(request, injection(), host=sni)
    assert REAL not in out and out.count(PH) == 2 and used == []


def test_host_with_port_still_matches() -> None:
    out, _ = run(b"GET / HTTP/1.1\r\nHost: API.test:443\r\nX-K: " + PH + b"\r\n\r\n", injection())
    assert REAL in out


def test_two_host_headers_get_the_placeholder() -> None:
    request = b"GET / HTTP/1.1\r\nHost: api.test\r\nHost: api.test\r\nX-Key: " + PH + b"\r\n\r\n"
    out, _ = run(request, injection())
    assert REAL not in out


def test_header_and_scheme_restrictions() -> None:
    only = injection(header="x-api-key")
    out, _ = run(
        b"GET / HTTP/1.1\r\nHost: api.test\r\nX-Api-Key: "
        + PH
        + b"\r\nX-Echo: "
        + PH
        + b"\r\n\r\n",
        only,
    )
    ((_, headers, _),) = parse(out)
    assert headers[b"x-api-key"] == REAL and headers[b"x-echo"] == PH
    bearer = injection(header="authorization", scheme="Bearer")
    out, _ = run(
        b"GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Token " + PH + b"\r\n\r\n", bearer
    )
    assert REAL not in out


def test_body_only_when_the_binding_says_so_with_a_new_length() -> None:
    body = b'{"key": "' + PH + b'"}'
    request = b"POST /v1 HTTP/1.1\r\nHost: api.test\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    out, _ = run(request, injection())
    assert REAL not in out
    out, used = run(request, injection(body=True), pieces=5)
    ((_, headers, got),) = parse(out)
    assert got == b'{"key": "' + REAL + b'"}'
    assert headers[b"content-length"] == str(len(got)).encode()
    assert used == [("TOKEN", "POST", "/v1")]


def test_chunked_body_is_rechunked_and_keepalive_requests_each_rewritten() -> None:
    first = (
        b"POST /up HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\nX-K: "
        + PH
        + b"\r\n\r\n"
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    second = b"GET /two HTTP/1.1\r\nHost: api.test\r\nX-K: " + PH + b"\r\n\r\n"
    out, used = run(first + second, injection(), pieces=9)
    (one, two) = parse(out)
    assert one[2] == b"hello world" and one[1][b"x-k"] == REAL
    assert two[0] == b"/two" and two[1][b"x-k"] == REAL
    assert [u[2] for u in used] == ["/up", "/two"]


def test_expect_continue_is_answered_when_the_body_is_held() -> None:
    rewriter = RequestRewriter(HOST, lambda: (injection(body=True),), lambda *a: None)
    out = rewriter.feed(
        b"PUT /f HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"
    )
    assert out == b"" and rewriter.to_client == b"HTTP/1.1 100 Continue\r\n\r\n"
    out = rewriter.feed(b"abc")
    assert b"expect" not in out.lower() and out.endswith(b"\r\n\r\nabc")


def test_after_an_upgrade_bytes_pass_unchanged() -> None:
    out, _ = run(
        b"GET /ws HTTP/1.1\r\nHost: api.test\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\n\r\nRAW" + PH,
        injection(),
    )
    assert out.endswith(b"RAW" + PH)


def test_garbage_is_refused() -> None:
    with pytest.raises(RewriteError):
        run(b"\x16\x03\x01 not http\r\n\r\n", injection())


def test_sigv4_is_resigned_with_the_real_keys() -> None:
    aws = injection(
        secret="AWS", value=b"real-secret-key", aws_key_id=b"AKIDREAL", hosts=("*.amazonaws.test",)
    )
    host = "bucket.s3.amazonaws.test"
    body = b"object data"
    request = AWSRequest(
        method="PUT",
        url=f"https://{host}/key.txt?x-id=PutObject",
        data=body,
        headers={"Host": host, "X-Amz-Content-SHA256": hashlib.sha256(body).hexdigest()},
    )
    SigV4Auth(Credentials(PH.decode(), "placeholder-secret"), "s3", "us-east-1").add_auth(request)
    head = b"PUT /key.txt?x-id=PutObject HTTP/1.1\r\n" + b"".join(
        f"{k}: {v}\r\n".encode() for k, v in request.headers.items()
    )
    stream = head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    out, used = run(stream, aws, host=host)
    ((target, headers, got),) = parse(out)
    as_text = {k.decode(): v.decode() for k, v in headers.items()}
    url = f"https://{host}{target.decode()}"
    assert verify("PUT", url, as_text, got, "AKIDREAL", "real-secret-key")
    assert not verify("PUT", url, as_text, got, "AKIDREAL", "placeholder-secret")
    assert used == [("AWS", "PUT", "/key.txt")]
    # Without a payload header the body is hashed by the broker (it holds the body).
    del request.headers["X-Amz-Content-SHA256"]
    request.headers["X-Amz-Date"] = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    SigV4Auth(Credentials(PH.decode(), "x"), "sqs", "eu-west-1").add_auth(request)
    head = b"PUT /key.txt?x-id=PutObject HTTP/1.1\r\n" + b"".join(
        f"{k}: {v}\r\n".encode() for k, v in request.headers.items()
    )
    out, _ = run(head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body), aws, host=host)
    ((target, headers, got),) = parse(out)
    as_text = {k.decode(): v.decode() for k, v in headers.items()}
    assert verify(
        "PUT", f"https://{host}{target.decode()}", as_text, got, "AKIDREAL", "real-secret-key"
    )


def test_bodies_held_at_once_are_bounded_across_connections() -> None:
    from corral.network.broker.rewrite import BodyBudget

    budget = BodyBudget(limit=10)
    body = b"k=" + PH
    head = b"POST /b HTTP/1.1\r\nHost: api.test\r\nContent-Length: %d\r\n\r\n" % len(body)
    first = RequestRewriter(HOST, lambda: (injection(body=True),), lambda *a: None, budget=budget)
    assert first.feed(head + body[:8]) == b""  # held: 8 of the 10 bytes
    second = RequestRewriter(HOST, lambda: (injection(body=True),), lambda *a: None, budget=budget)
    out = second.feed(head + body)  # no room: sent on as the sandbox wrote it
    assert out.endswith(body) and REAL not in out
    first.close()
    assert budget.held == 0


def test_an_oversized_request_head_ends_the_connection() -> None:
    with pytest.raises(RewriteError, match="over 64 KiB"):
        run(b"GET / HTTP/1.1\r\nHost: api.test\r\n" + b"X-Big: " + b"a" * 70000 + b"\r\n\r\n")
