"""Per-sandbox envd access tokens and the signatures of E2B's signed file URLs.

A sandbox's access token is ``HMAC-SHA256(secret, sandbox_id)``: nothing per sandbox is stored,
and a token names exactly one sandbox. Its traffic access token (for its other ports, sent as
``E2B-Traffic-Access-Token``) is ``HMAC-SHA256(secret, "traffic:" + sandbox_id)``: it opens the
sandbox's ports but not envd. The secret is 32 random bytes in ``DATA/e2b.secret``
(mode 0600), made at first use, so tokens survive a daemon restart.

A signed URL carries ``signature=v1_<b64(sha256(path:operation:user:token[:expiration]))>``
(the E2B SDK's format); it is checked against the sandbox's token, and its expiration if any.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable
from pathlib import Path

from corral.at_rest import load_or_make_key

SECRET_FILE = "e2b.secret"


def load_secret(data_dir: Path) -> bytes:
    """The token secret of this data dir, made (0600) at first use."""
    return load_or_make_key(data_dir / SECRET_FILE)


class AccessTokens:
    """Issues and checks the access tokens of sandboxes for one workspace secret."""

    def __init__(self, secret: bytes | Callable[[], bytes]) -> None:
        self._source = secret
        self._secret: bytes | None = secret if isinstance(secret, bytes) else None

    def secret(self) -> bytes:
        """The secret; a callable source is called once, at first use (not at app build)."""
        if self._secret is None:
            assert callable(self._source)
            self._secret = self._source()
        return self._secret

    def token(self, sandbox_id: str) -> str:
        return hmac.new(self.secret(), sandbox_id.encode(), hashlib.sha256).hexdigest()

    def check(self, sandbox_id: str, presented: str | None) -> bool:
        return bool(presented) and hmac.compare_digest(self.token(sandbox_id), presented or "")

    def traffic_token(self, sandbox_id: str) -> str:
        return hmac.new(self.secret(), f"traffic:{sandbox_id}".encode(), hashlib.sha256).hexdigest()

    def check_traffic(self, sandbox_id: str, presented: str | None) -> bool:
        wanted = self.traffic_token(sandbox_id)
        return bool(presented) and hmac.compare_digest(wanted, presented or "")

    def signature(
        self, sandbox_id: str, path: str, operation: str, user: str, expiration: int | None
    ) -> str:
        raw = f"{path}:{operation}:{user}:{self.token(sandbox_id)}"
        if expiration is not None:
            raw += f":{expiration}"
        digest = hashlib.sha256(raw.encode()).digest()
        return "v1_" + base64.b64encode(digest).rstrip(b"=").decode("ascii")

    def check_signature(
        self,
        sandbox_id: str,
        presented: str,
        *,
        path: str,
        operation: str,
        user: str,
        expiration: int | None,
    ) -> bool:
        if expiration is not None and expiration < time.time():
            return False
        wanted = self.signature(sandbox_id, path, operation, user, expiration)
        return hmac.compare_digest(wanted, presented)
