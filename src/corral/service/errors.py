"""The service's error tree. Edges translate these; nothing below the service raises them.

CorralError                 code        meaning
├── NotFound                not_found   no such sandbox, template, process or file
├── InvalidRequest          invalid     the request itself is wrong (bad resources, bad path)
├── StateConflict           conflict    the sandbox's state does not allow the action
├── CapacityExceeded        capacity    over a ceiling or over the workspace's free capacity
├── TooLarge                too_large   a request body (or a write) over its size bound
├── ExecFailed              exec_failed the command could not be started in the sandbox
├── SandboxUnavailable      sandbox_unavailable  the sandbox's agent cannot be reached
├── Unauthorized            unauthorized         missing or wrong API key
├── Forbidden               forbidden            a credential that does not grant this
└── OperationFailed         internal    a runtime or network step failed; message says which

A class's ``code`` (or the ``code=`` given, e.g. ``exists``, ``no_space``, ``permission_denied``
for what a sandbox's agent reported) is one of ``corral.errcodes``; the API answers with its
status from there.
"""

from __future__ import annotations


class CorralError(Exception):
    """Base of every error the service reports to a caller."""

    code = "internal"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class NotFound(CorralError):
    code = "not_found"


class InvalidRequest(CorralError):
    code = "invalid"


class StateConflict(CorralError):
    code = "conflict"


class CapacityExceeded(CorralError):
    code = "capacity"


class TooLarge(CorralError):
    code = "too_large"


class ExecFailed(CorralError):
    code = "exec_failed"


class SandboxUnavailable(CorralError):
    code = "sandbox_unavailable"


class Unauthorized(CorralError):
    code = "unauthorized"


class Forbidden(CorralError):
    code = "forbidden"


class OperationFailed(CorralError):
    code = "internal"
