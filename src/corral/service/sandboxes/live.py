"""The live side of a sandbox: its agent link. ``translate_agent_error`` maps what a sandbox's
agent reports to the service's error tree; the agent runs inside the sandbox and is not trusted,
so only the codes it may use pass through."""

from __future__ import annotations

from corral.runtime.agent_client import AgentError
from corral.service.errors import (
    CorralError,
    ExecFailed,
    InvalidRequest,
    NotFound,
    OperationFailed,
    StateConflict,
    TooLarge,
)

# The codes a sandbox's agent may answer with (agent/errors.py). The agent runs inside the sandbox
# and is not trusted: any other code it sends is reported as the daemon's `internal`.
AGENT_CODES = frozenset(
    {
        "bad_request",
        "is_a_directory",
        "not_a_directory",
        "exists",
        "conflict",
        "not_found",
        "permission_denied",
        "no_space",
        "exec_failed",
        "too_large",
    }
)


def translate_agent_error(sandbox_id: str, exc: AgentError) -> CorralError:
    """Map an error the agent reported to the service's tree (keeping the agent's code)."""
    code = getattr(exc, "code", None) or "internal"
    message = f"sandbox {sandbox_id}: {exc}"
    if code not in AGENT_CODES:
        return OperationFailed(message)
    if code == "not_found":
        return NotFound(message)
    if code == "exec_failed":
        return ExecFailed(message)
    if code == "conflict":
        return StateConflict(message)
    if code == "too_large":
        return TooLarge(message)
    if code in {"bad_request", "is_a_directory", "not_a_directory"}:
        return InvalidRequest(message, code=code)
    return CorralError(message, code=code)  # exists, permission_denied, no_space
