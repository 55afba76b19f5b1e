"""The SDK's exceptions: one tree, every failure a caller can see.

```
CorralError                     anything the SDK raises on purpose
├── ConfigurationError          no API key found (says how to set one)
├── ConnectionFailed            the daemon cannot be reached, or a stream broke
└── APIError                    the daemon answered with an error (status, code, message);
    │                           as itself for `internal` (500) and codes it does not know
    ├── AuthenticationError     401 `unauthorized`: missing or wrong API key
    ├── PermissionDenied        403 `permission_denied`: the sandbox refused access to a file;
    │   │                       `forbidden`: the key may not do this (its role or scopes)
    │   ├── QuotaExceeded       403 `quota`: over a quota of the key (quota, use, excess named)
    │   └── PolicyDenied        403 `policy`: the workspace policy does not allow the request
    ├── NotFound                404: no such sandbox, process, file or template
    ├── Conflict                409 `conflict`: wrong state for the action; `exists`;
    │                           `secret_bearing`: the sandbox holds secrets that would be copied
    ├── CapacityError           409 `capacity`: over a ceiling or over free capacity
    ├── InvalidRequest          400/422 `invalid`, `bad_request`, ...: a malformed request
    │   ├── TooLarge            413 `too_large`: a body or upload over its bound
    │   └── UntrustedExport     403 `untrusted`: an import whose signer is not trusted
    ├── ExecFailed              400 `exec_failed`: the command could not be started
    ├── SandboxUnavailable      502/503: the sandbox's agent cannot be reached
    ├── RateLimited             429 `rate_limited`: too many requests; `retry_after` seconds
    ├── Timeout                 504 `timeout`: the daemon gave up waiting for a step
    └── NoSpace                 507 `no_space`: the sandbox's disk is full
```

Which code becomes which class is `corral.errcodes` (the table the daemon answers from too); an
answer without a code is classed by its status. Foreign errors (httpx) are translated where they
cross into the SDK, with `raise ... from exc`, so a caller never has to import httpx to handle a
failure.
"""

from __future__ import annotations

from typing import Any

from corral.errcodes import CODES

__all__ = [
    "APIError",
    "AuthenticationError",
    "CapacityError",
    "ConfigurationError",
    "Conflict",
    "ConnectionFailed",
    "CorralError",
    "ExecFailed",
    "InvalidRequest",
    "NoSpace",
    "NotFound",
    "PermissionDenied",
    "PolicyDenied",
    "QuotaExceeded",
    "RateLimited",
    "SandboxUnavailable",
    "Timeout",
    "TooLarge",
    "UntrustedExport",
    "error_from_response",
]


class CorralError(Exception):
    """Base of every exception the SDK raises on purpose."""


class ConfigurationError(CorralError):
    """The SDK is missing a setting it cannot guess (for now: the API key)."""


class ConnectionFailed(CorralError):
    """The daemon at `url` could not be reached, or a response stream broke off."""

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url

    @classmethod
    def unreachable(cls, url: str, reason: str) -> ConnectionFailed:
        """The daemon did not take the connection (every transport says it the same way)."""
        return cls(
            f"cannot reach the corral daemon at {url} ({reason}); "
            "start it with `./scripts/serve` or `corral serve`, "
            "or point CORRAL_URL / --url at it",
            url=url,
        )

    @classmethod
    def lost(cls, url: str, reason: str) -> ConnectionFailed:
        """The connection broke off after it was made."""
        return cls(f"lost the connection to the corral daemon at {url}: {reason}", url=url)


class APIError(CorralError):
    """The daemon answered with an error status.

    `status` is the HTTP status, `code` the daemon's machine code (`not_found`, `capacity`, ...),
    `message` its human sentence.
    """

    def __init__(self, message: str, *, status: int, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(status={self.status}, code={self.code!r}, message={self.message!r})"


class AuthenticationError(APIError):
    """The API key is missing or wrong."""


class PermissionDenied(APIError):
    """Not allowed: the sandbox refused access to a file (`permission_denied`), or the API key
    may not do this (`forbidden`). The key itself is fine."""


class QuotaExceeded(PermissionDenied):
    """Over a quota of the API key; the message names the quota, the use and the excess."""


class PolicyDenied(PermissionDenied):
    """The workspace policy (`corral policy show`) does not allow the request."""


class RateLimited(APIError):
    """Too many requests with this API key; `retry_after` says how many seconds to wait."""

    retry_after: float | None = None


class NotFound(APIError):
    """The sandbox, process, file or template does not exist."""


class Conflict(APIError):
    """The sandbox is in the wrong state for the action (e.g. exec on a parked sandbox)."""


class CapacityError(APIError):
    """The request is over a policy ceiling or over the workspace's free capacity."""


class InvalidRequest(APIError):
    """The daemon rejected the request as malformed."""


class TooLarge(InvalidRequest):
    """The request body or an upload is over the daemon's bound for it."""


class UntrustedExport(InvalidRequest):
    """An import refused because its signature is missing, wrong, or not by a trusted key: its
    memory is not restored (`corral trust add`, or import with `fs_only`)."""


class ExecFailed(APIError):
    """The command could not be started (not found, bad working directory, ...)."""


class SandboxUnavailable(APIError):
    """The sandbox exists but its in-sandbox agent cannot be reached."""


class Timeout(APIError):
    """The daemon gave up waiting for a step (the sandbox's agent, a runtime action)."""


class NoSpace(APIError):
    """The sandbox's disk is full (its writes fail with ENOSPC)."""


_BY_CODE: dict[str, type[APIError]] = {
    code: globals()[entry.sdk_error] for code, entry in CODES.items()
}

_BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidRequest,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    422: InvalidRequest,
    429: RateLimited,
    502: SandboxUnavailable,
    503: SandboxUnavailable,
    504: Timeout,
    507: NoSpace,
}

# The code an answer without one is given: its class's first code in the table.
_DEFAULT_CODE: dict[type[APIError], str] = {}
for _code, _cls in _BY_CODE.items():
    _DEFAULT_CODE.setdefault(_cls, _code)
del _code, _cls


def error_from_response(status: int, body: Any) -> APIError:
    """Build the exception for an error answer: by the body's `code` first, else by status.

    `body` is the decoded JSON (`{"code", "message"}`, or FastAPI's `{"detail": ...}`), or raw text.
    """
    code = ""
    message = ""
    if isinstance(body, dict):
        code = str(body.get("code") or "")
        message = str(body.get("message") or "")
        detail = body.get("detail")
        if not message and detail is not None:
            message = _describe_detail(detail)
    elif isinstance(body, str):
        message = body.strip()
    if not message:
        message = f"the daemon answered HTTP {status}"
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or APIError
    if not code:
        code = _DEFAULT_CODE.get(cls, "internal")
    return cls(message, status=status, code=code)


def _describe_detail(detail: Any) -> str:
    """FastAPI's validation detail is a list of {loc, msg}; flatten it to one line."""
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
                msg = str(item.get("msg", item))
                parts.append(f"{loc}: {msg}" if loc else msg)
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)
