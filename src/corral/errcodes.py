"""The error codes: the one table shared by the service, the API, the SDK and the agent.

Every failure that crosses a boundary carries a machine code (``{"code", "message"}`` in an API
answer). This module owns the list: for each code, the HTTP status the API answers with, the name
of the SDK exception a caller catches, and a one-line meaning (docs/api.md lists them too).

Who uses it, and why it is shaped so:

- the service raises ``corral.service.errors`` classes whose ``code`` is one of these;
- the API answers a code with ``status_of(code)``, and an answer that has only a status (a
  framework 404/405/413) with ``code_for_status(status)``;
- the SDK turns a code into ``sdk_error`` (by class name, so this module imports nothing of the
  SDK, and the SDK imports nothing of the daemon: this module is a leaf that imports nothing);
- the in-sandbox agent keeps its own copy of the codes it answers (``agent/errors.py`` and its
  ``ApiError`` raises), because it is built into one bytecode file from its own package only
  (``runtime/inject.py``) and imports nothing outside it. ``tests/unit/test_errcodes.py`` asserts
  that every code and status the agent can answer is in this table with the same status.

Add a code here first, then raise it; a code that is not here is answered as ``internal``'s
status and reaches an SDK caller as a bare ``APIError``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CODES", "ErrorCode", "code_for_status", "status_of"]


@dataclass(frozen=True)
class ErrorCode:
    code: str
    status: int
    sdk_error: str  # a class in corral.sdk.errors
    meaning: str


# code, HTTP status, SDK exception, meaning. For each status, the first code listed is the one that
# an answer with only a status gets.
_ROWS = (
    ("invalid", 400, "InvalidRequest", "a malformed request (422: its body fails validation)"),
    ("bad_request", 400, "InvalidRequest", "the agent refused a malformed path or argument"),
    ("is_a_directory", 400, "InvalidRequest", "a file operation was given a directory"),
    ("not_a_directory", 400, "InvalidRequest", "a directory operation was given a file"),
    ("exec_failed", 400, "ExecFailed", "the command could not be started in the sandbox"),
    ("unauthorized", 401, "AuthenticationError", "the API key is missing or wrong"),
    ("permission_denied", 403, "PermissionDenied", "the sandbox refused access to a file"),
    ("forbidden", 403, "PermissionDenied", "the API key is valid but may not do this"),
    ("untrusted", 403, "UntrustedExport", "an import whose signer is not trusted"),
    ("quota", 403, "QuotaExceeded", "over a quota of the API key (names quota, use, excess)"),
    ("policy", 403, "PolicyDenied", "the workspace policy does not allow the request"),
    ("not_found", 404, "NotFound", "no such sandbox, template, process, file or route"),
    ("conflict", 409, "Conflict", "the sandbox's or process's state does not allow the action"),
    ("exists", 409, "Conflict", "the path or name already exists"),
    ("secret_bearing", 409, "Conflict", "the sandbox holds secrets that the action would copy"),
    ("capacity", 409, "CapacityError", "over a ceiling or over the workspace's free capacity"),
    ("too_large", 413, "TooLarge", "the request body or an upload is over its bound"),
    ("rate_limited", 429, "RateLimited", "too many requests with this key; see Retry-After"),
    ("head_too_large", 431, "TooLarge", "the request head is over its bound (64 KiB)"),
    ("internal", 500, "APIError", "the daemon failed; the message and its log say which step"),
    ("bad_gateway", 502, "SandboxUnavailable", "the sandbox's port refused or cut the connection"),
    ("sandbox_unavailable", 503, "SandboxUnavailable", "the sandbox's agent cannot be reached"),
    ("unavailable", 503, "SandboxUnavailable", "the agent refused, reset or cut off the answer"),
    ("timeout", 504, "Timeout", "the daemon gave up waiting for a step to finish"),
    ("no_space", 507, "NoSpace", "the sandbox's disk is full"),
)
_TABLE = tuple(ErrorCode(*row) for row in _ROWS)

CODES: dict[str, ErrorCode] = {entry.code: entry for entry in _TABLE}

_CODE_BY_STATUS: dict[int, str] = {}
for _entry in _TABLE:
    _CODE_BY_STATUS.setdefault(_entry.status, _entry.code)
del _entry


def status_of(code: str) -> int:
    """The HTTP status for ``code``; an unknown code is answered as ``internal``."""
    entry = CODES.get(code)
    return entry.status if entry else CODES["internal"].status


def code_for_status(status: int) -> str:
    """The code for an answer that has only a status: its first code in the table, else
    ``invalid`` for a 4xx and ``internal`` for anything else."""
    if status in _CODE_BY_STATUS:
        return _CODE_BY_STATUS[status]
    return "invalid" if 400 <= status < 500 else "internal"
