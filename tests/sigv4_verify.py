"""A SigV4 verifier as an S3-style endpoint would run it: recompute the signature of a received
request with the real secret key (botocore's signer, same timestamp and signed headers) and
compare. Shared by the broker's unit tests and the e2e fake upstream."""

from __future__ import annotations

import hmac
import re

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

_AUTH = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, ?SignedHeaders=(?P<signed>[^,]+), ?"
    r"Signature=(?P<sig>[0-9a-f]+)"
)


def verify(
    method: str, url: str, headers: dict[str, str], body: bytes, key_id: str, secret: str
) -> bool:
    """Whether ``headers['authorization']`` is a valid signature by ``key_id``/``secret``."""
    lower = {k.lower(): v for k, v in headers.items()}
    match = _AUTH.match(lower.get("authorization", ""))
    if match is None or match["key"] != key_id:
        return False
    signed = match["signed"].split(";")
    request = AWSRequest(
        method=method, url=url, data=body, headers={h: lower.get(h, "") for h in signed}
    )
    auth = SigV4Auth(Credentials(key_id, secret), match["service"], match["region"])
    request.context["timestamp"] = lower.get("x-amz-date", "")
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    return hmac.compare_digest(expected, match["sig"])
