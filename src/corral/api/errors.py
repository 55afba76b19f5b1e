"""The one table that maps service errors to HTTP statuses, and the JSON error body."""

from __future__ import annotations

import json

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from corral.service.errors import CorralError


class AsciiJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: sandbox file names that are not UTF-8 travel as surrogate
    escapes (``\\udcXX``), which valid JSON can carry but a UTF-8 encoder cannot."""

    def render(self, content: object) -> bytes:
        return json.dumps(
            content, ensure_ascii=True, allow_nan=False, separators=(",", ":")
        ).encode()


STATUS_BY_CODE = {
    "unauthorized": 401,
    "not_found": 404,
    "invalid": 400,
    "bad_request": 400,
    "is_a_directory": 400,
    "not_a_directory": 400,
    "exists": 409,
    "permission_denied": 403,
    "forbidden": 403,
    "untrusted": 403,
    "no_space": 507,
    "conflict": 409,
    "secret_bearing": 409,
    "capacity": 409,
    "too_large": 413,
    "exec_failed": 400,
    "sandbox_unavailable": 503,
    "internal": 500,
}


def error_response(status: int, code: str, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return AsciiJSONResponse(
        {"code": code, "message": message}, status_code=status, headers=headers
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(CorralError)
    async def _corral(_: Request, exc: CorralError) -> JSONResponse:
        return error_response(STATUS_BY_CODE.get(exc.code, 500), exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
            parts.append(f"{where}: {error.get('msg')}" if where else str(error.get("msg")))
        return error_response(422, "invalid", "invalid request: " + "; ".join(parts))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "invalid", 401: "unauthorized", 413: "too_large"}.get(
            exc.status_code, "invalid"
        )
        return error_response(exc.status_code, code, str(exc.detail))
