"""The SDK's exceptions: one tree, every failure a caller can see.

```
CorralError                     anything the SDK raises on purpose
├── ConfigurationError          no API key found (says how to set one)
├── ConnectionFailed            the daemon cannot be reached, or a stream broke
└── APIError                    the daemon answered with an error (status, code, message)
    ├── AuthenticationError     401/403: missing or wrong API key
    ├── NotFound                404: no such sandbox, process, file or template
    ├── Conflict                409 `conflict`: wrong state for the action, or
    │                           `secret_bearing`: the sandbox holds secrets that would be copied
    ├── CapacityError           409 `capacity`: over a ceiling or over free capacity
    ├── InvalidRequest          400/422 `invalid`: a malformed request
    │   └── UntrustedExport     403 `untrusted`: an import whose signer is not trusted
    ├── ExecFailed              400 `exec_failed`: the command could not be started
    └── SandboxUnavailable      502/503: the sandbox's agent cannot be reached
```

Foreign errors (httpx) are translated where they cross into the SDK, with `raise ... from exc`,
so a caller never has to import httpx to handle a failure.
"""

from __future__ import annotations

from typing import Any

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
    "NotFound",
    "SandboxUnavailable",
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


class NotFound(APIError):
    """The sandbox, process, file or template does not exist."""


class Conflict(APIError):
    """The sandbox is in the wrong state for the action (e.g. exec on a parked sandbox)."""


class CapacityError(APIError):
    """The request is over a policy ceiling or over the workspace's free capacity."""


class InvalidRequest(APIError):
    """The daemon rejected the request as malformed."""


class UntrustedExport(InvalidRequest):
    """An import refused because its signature is missing, wrong, or not by a trusted key: its
    memory is not restored (`corral trust add`, or import with `fs_only`)."""


class ExecFailed(APIError):
    """The command could not be started (not found, bad working directory, ...)."""


class SandboxUnavailable(APIError):
    """The sandbox exists but its in-sandbox agent cannot be reached."""


_BY_CODE: dict[str, type[APIError]] = {
    "unauthorized": AuthenticationError,
    "forbidden": AuthenticationError,
    "not_found": NotFound,
    "conflict": Conflict,
    "secret_bearing": Conflict,
    "capacity": CapacityError,
    "invalid": InvalidRequest,
    "untrusted": UntrustedExport,
    "too_large": InvalidRequest,
    "exec_failed": ExecFailed,
    "sandbox_unavailable": SandboxUnavailable,
}

_DEFAULT_CODE: dict[type[APIError], str] = {
    AuthenticationError: "unauthorized",
    NotFound: "not_found",
    Conflict: "conflict",
    InvalidRequest: "invalid",
    SandboxUnavailable: "sandbox_unavailable",
}

_BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidRequest,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    422: InvalidRequest,
    502: SandboxUnavailable,
    503: SandboxUnavailable,
}


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
