"""The agent's error answers: ``ApiError`` and the translation of ``OSError`` into one.

Every failure a client should see is raised as an ``ApiError`` and answered by the connection as
``{"error": message, "code": code}`` with its HTTP status (codes in docs/agent-protocol.md);
``os_error`` maps an errno to its status and code and says what was being done.
"""

from __future__ import annotations

import errno


class ApiError(Exception):
    """An error answered to the client as ``{"error": message, "code": code}`` with ``status``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def bad_request(message: str) -> ApiError:
    return ApiError(400, "bad_request", message)


_ERRNO_CODES = {
    errno.ENOENT: (404, "not_found"),
    errno.EISDIR: (400, "is_a_directory"),
    errno.ENOTDIR: (400, "not_a_directory"),
    errno.EEXIST: (409, "exists"),
    errno.ENOTEMPTY: (409, "conflict"),
    errno.EBUSY: (409, "conflict"),
    errno.EACCES: (403, "permission_denied"),
    errno.EPERM: (403, "permission_denied"),
    errno.EROFS: (403, "permission_denied"),
    errno.ENOSPC: (507, "no_space"),
    errno.EDQUOT: (507, "no_space"),
    errno.ENAMETOOLONG: (400, "bad_request"),
    errno.ELOOP: (400, "bad_request"),
    errno.EINVAL: (400, "bad_request"),
}


def os_error(exc: OSError, doing: str) -> ApiError:
    """Translate ``exc`` into an ApiError whose message says what was being done (and to what)."""
    status, code = _ERRNO_CODES.get(exc.errno or 0, (500, "internal"))
    return ApiError(status, code, f"{doing}: {exc.strerror or exc}")
