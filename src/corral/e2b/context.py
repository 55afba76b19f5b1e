"""What the envd dispatcher has established about a request, read back by the envd handlers.

The dispatcher (``mount``) authenticates a request for a sandbox and then replaces any
caller-sent ``x-corral-*`` header with what it checked (the sandbox id, whether the access token
was right); handlers trust only those.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

SANDBOX_HEADER = "x-corral-sandbox"
# Set to "1" when the request carried the sandbox's access token.
TOKEN_OK_HEADER = "x-corral-token-ok"
INTERNAL_HEADERS = {SANDBOX_HEADER.encode(), TOKEN_OK_HEADER.encode()}


def sandbox_of(headers: Mapping[str, str]) -> str:
    return headers.get(SANDBOX_HEADER, "")


def user_of(headers: Mapping[str, str]) -> str | None:
    """The user envd runs as, from ``Authorization: Basic base64(user:)``; None: the default."""
    scheme, _, value = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    user = decoded.partition(":")[0]
    return user or None
