"""Console logins: one-time login tokens and the browser sessions they are exchanged for.

A login token is made by a key holder (``corral console``) and is good for one exchange within
``token_ttl`` seconds; the exchange (or a pasted API key) gives a session: a random cookie value
and a CSRF token. A session stands for the API key that opened it, so every request it makes is
checked as that key is (a revoked key ends its sessions at once) with that key's role.

Invariants: tokens and cookie values are 256-bit random; only their SHA-256 digests are kept as
dict keys, so a memory dump of the table does not hand out sessions; both tables are bounded
(the oldest entries go first) and expire. Sessions live in the daemon's memory: a daemon restart
logs everyone out. Event-loop only (no locking).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

__all__ = ["COOKIE_NAME", "CSRF_HEADER", "ConsoleSession", "ConsoleSessions", "LoginToken"]

COOKIE_NAME = "corral_session"
CSRF_HEADER = "x-corral-csrf"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class _Expiring(Protocol):
    expires_at: float


Entry = TypeVar("Entry", bound=_Expiring)


def _make_room(table: OrderedDict[str, Entry], limit: int) -> None:
    """Drop expired entries, then the oldest ones until one more fits under ``limit``."""
    now = time.time()
    for key in [k for k, v in table.items() if v.expires_at < now]:
        del table[key]
    while len(table) >= limit:
        table.popitem(last=False)


@dataclass
class LoginToken:
    api_key: str
    expires_at: float


@dataclass
class ConsoleSession:
    api_key: str
    csrf: str
    expires_at: float
    created_at: float = field(default_factory=time.time)

    def csrf_matches(self, presented: str | None) -> bool:
        return bool(presented) and hmac.compare_digest(self.csrf, presented or "")


class ConsoleSessions:
    """The login tokens and sessions of one daemon (see the module docstring)."""

    def __init__(
        self,
        *,
        token_ttl: float = 120.0,
        session_ttl: float = 12 * 3600.0,
        max_tokens: int = 256,
        max_sessions: int = 1024,
    ) -> None:
        self.token_ttl = token_ttl
        self.session_ttl = session_ttl
        self._max_tokens = max_tokens
        self._max_sessions = max_sessions
        self._tokens: OrderedDict[str, LoginToken] = OrderedDict()
        self._sessions: OrderedDict[str, ConsoleSession] = OrderedDict()

    def issue_token(self, api_key: str) -> tuple[str, float]:
        """A new one-time login token for ``api_key``: (token, expiry as a Unix time)."""
        _make_room(self._tokens, self._max_tokens)
        token = secrets.token_urlsafe(32)
        expires_at = time.time() + self.token_ttl
        self._tokens[_digest(token)] = LoginToken(api_key, expires_at)
        return token, expires_at

    def redeem_token(self, token: str) -> str | None:
        """The API key behind ``token``, once: the token is gone after this, used or expired."""
        found = self._tokens.pop(_digest(token), None)
        if found is None or found.expires_at < time.time():
            return None
        return found.api_key

    def open(self, api_key: str) -> tuple[str, ConsoleSession]:
        """A new session for ``api_key``: (cookie value, session)."""
        _make_room(self._sessions, self._max_sessions)
        cookie = secrets.token_urlsafe(32)
        session = ConsoleSession(
            api_key=api_key,
            csrf=secrets.token_urlsafe(24),
            expires_at=time.time() + self.session_ttl,
        )
        self._sessions[_digest(cookie)] = session
        return cookie, session

    def get(self, cookie: str | None) -> ConsoleSession | None:
        if not cookie:
            return None
        session = self._sessions.get(_digest(cookie))
        if session is None or session.expires_at < time.time():
            return None
        return session

    def close(self, cookie: str | None) -> None:
        if cookie:
            self._sessions.pop(_digest(cookie), None)
