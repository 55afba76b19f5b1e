"""AWS SigV4 re-signing: the sandbox signs with placeholder keys, the broker signs again with the
real ones (botocore's signer), so the real secret access key never enters the sandbox.

A request is re-signed when its ``Authorization`` is ``AWS4-HMAC-SHA256`` and its credential's
access key id is the placeholder of an AWS secret bound to the host. The region and service come
from the sandbox's credential scope; the payload hash is the request's ``X-Amz-Content-SHA256``
when it has one (S3), else the SHA-256 of the body (which the rewriter then holds). Every header
but botocore's unsigned ones is signed. Anything else (a presigned URL, another scheme) passes
unchanged, so upstream refuses the placeholder signature.
"""

from __future__ import annotations

import re

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from corral.network.broker.injection import Injection

__all__ = ["needs_body", "resign", "signing_injection"]

_CREDENTIAL = re.compile(rb"credential=([^/,\s]+)/(\d{8})/([a-z0-9-]+)/([a-z0-9-]+)/aws4_request")
_DROP = {b"authorization", b"x-amz-date"}


def _scope(headers: list[tuple[bytes, bytes]]) -> tuple[bytes, str, str] | None:
    for name, value in headers:
        if name == b"authorization" and value[:16].lower() == b"aws4-hmac-sha256":
            match = _CREDENTIAL.search(_lower_scope(value))
            if match is None:
                return None
            return match[1], match[3].decode(), match[4].decode()
    return None


def _lower_scope(value: bytes) -> bytes:
    """The ``Authorization`` value from its ``Credential=`` on (keyword lowercased, the key id
    kept as sent: placeholders compare byte for byte)."""
    start = value.lower().find(b"credential=")
    if start < 0:
        return b""
    return b"credential=" + value[start + len(b"credential=") :]


def signing_injection(
    headers: list[tuple[bytes, bytes]], active: tuple[Injection, ...]
) -> Injection | None:
    """The AWS secret whose placeholder key id signed this request (``headers`` lowercased)."""
    scope = _scope(headers)
    if scope is None:
        return None
    for inj in active:
        if inj.aws_key_id is not None and inj.placeholder == scope[0]:
            return inj
    return None


def needs_body(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the payload hash must be computed from the body (no ``X-Amz-Content-SHA256``)."""
    return not any(name == b"x-amz-content-sha256" for name, _ in headers)


def resign(
    method: str,
    host: str,
    target: bytes,
    headers: list[tuple[bytes, bytes]],
    body: bytes | None,
    inj: Injection,
) -> list[tuple[bytes, bytes]] | None:
    """``headers`` signed again with ``inj``'s real keys, or None if the request cannot be."""
    scope = _scope([(n.lower(), v) for n, v in headers])
    if scope is None or inj.aws_key_id is None:
        return None
    _, region, service = scope
    kept = [(n, v) for n, v in headers if n.lower() not in _DROP]
    request = AWSRequest(
        method=method,
        url=f"https://{host}{target.decode('latin-1')}",
        data=body or b"",
        headers={n.decode("latin-1"): v.decode("latin-1") for n, v in kept},
    )
    credentials = Credentials(inj.aws_key_id.decode(), inj.value.decode())
    SigV4Auth(credentials, service, region).add_auth(request)
    signed = [
        (b"X-Amz-Date", request.headers["X-Amz-Date"].encode("latin-1")),
        (b"Authorization", request.headers["Authorization"].encode("latin-1")),
    ]
    return kept + signed
