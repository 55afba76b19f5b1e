"""How corral's service errors reach an E2B SDK: the statuses and Connect codes it maps.

The control API answers ``{"code": STATUS, "message": ...}`` with E2B's statuses; envd answers
Connect errors (RPC) or the same JSON body (``/files``). A sandbox that is gone or parked is
"not found" to envd (502 / UNAVAILABLE with "... was not found"), which the SDK reports as
``SandboxNotRunningException``.
"""

from __future__ import annotations

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from fastapi.responses import JSONResponse

from corral.service.errors import CorralError

# corral error code -> HTTP status of E2B's control API.
API_STATUS = {
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "invalid": 400,
    "conflict": 409,
    "secret_bearing": 409,
    "capacity": 429,
    "sandbox_unavailable": 502,
}

# corral (and agent) error code -> Connect code of envd.
CONNECT_CODE = {
    "unauthorized": Code.UNAUTHENTICATED,
    "not_found": Code.NOT_FOUND,
    "invalid": Code.INVALID_ARGUMENT,
    "bad_request": Code.INVALID_ARGUMENT,
    "is_a_directory": Code.INVALID_ARGUMENT,
    "not_a_directory": Code.INVALID_ARGUMENT,
    "exec_failed": Code.INVALID_ARGUMENT,
    "exists": Code.ALREADY_EXISTS,
    "permission_denied": Code.PERMISSION_DENIED,
    "forbidden": Code.PERMISSION_DENIED,
    "no_space": Code.RESOURCE_EXHAUSTED,
    "conflict": Code.UNAVAILABLE,
    "sandbox_unavailable": Code.UNAVAILABLE,
}

# corral (and agent) error code -> HTTP status of envd's /files routes.
FILES_STATUS = {
    "unauthorized": 401,
    "not_found": 404,
    "invalid": 400,
    "bad_request": 400,
    "is_a_directory": 400,
    "not_a_directory": 400,
    "exists": 409,
    "permission_denied": 403,
    "forbidden": 403,
    "no_space": 507,
    "conflict": 502,
    "sandbox_unavailable": 502,
}


def gone_message(sandbox_id: str, why: str) -> str:
    # "was not found" is what the SDK looks for to say the sandbox is not running.
    return f"The sandbox {sandbox_id} was not found: {why}"


def api_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status)


def api_error_of(exc: CorralError) -> JSONResponse:
    return api_error(API_STATUS.get(exc.code, 500), exc.message)


def connect_error_of(sandbox_id: str, exc: CorralError) -> ConnectError:
    code = CONNECT_CODE.get(exc.code, Code.INTERNAL)
    message = exc.message
    if exc.code == "conflict":
        message = gone_message(sandbox_id, exc.message)
    return ConnectError(code, message)


def files_error_of(sandbox_id: str, exc: CorralError) -> JSONResponse:
    status = FILES_STATUS.get(exc.code, 500)
    message = gone_message(sandbox_id, exc.message) if exc.code == "conflict" else exc.message
    return JSONResponse({"code": status, "message": message}, status_code=status)
