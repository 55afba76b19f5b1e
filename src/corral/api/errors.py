"""Service errors to HTTP answers, and the JSON error body ``{"code", "message"}``.

The status of each code is ``corral.errcodes`` (one table for the service, the API and the SDK).
Every error leaves as that body, also one nobody expected: an exception that escapes a route is
answered as a 500 ``internal`` that names its type but not its text (which may hold host paths);
the traceback goes to the daemon's log.
"""

from __future__ import annotations

import json

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from corral.errcodes import code_for_status, status_of
from corral.service.errors import CorralError


class AsciiJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: sandbox file names that are not UTF-8 travel as surrogate
    escapes (``\\udcXX``), which valid JSON can carry but a UTF-8 encoder cannot."""

    def render(self, content: object) -> bytes:
        return json.dumps(
            content, ensure_ascii=True, allow_nan=False, separators=(",", ":")
        ).encode()


def error_response(status: int, code: str, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return AsciiJSONResponse(
        {"code": code, "message": message}, status_code=status, headers=headers
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(CorralError)
    async def _corral(_: Request, exc: CorralError) -> JSONResponse:
        response = error_response(status_of(exc.code), exc.code, exc.message)
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            response.headers["Retry-After"] = str(int(retry_after))
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
            parts.append(f"{where}: {error.get('msg')}" if where else str(error.get("msg")))
        return error_response(422, "invalid", "invalid request: " + "; ".join(parts))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, code_for_status(exc.status_code), str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Starlette re-raises after answering, so the server logs the traceback as well.
        return error_response(
            500,
            "internal",
            f"the daemon failed unexpectedly ({type(exc).__name__}) while answering "
            f"{request.method} {request.url.path}; its log has the details",
        )
