"""Console sessions: log in (one-time token or API key), who am I, log out.

The cookie is ``HttpOnly`` (page scripts cannot read it), ``SameSite=Strict`` (other sites'
requests do not carry it) and ``Secure`` when the console is reached over https. The CSRF token
is handed to the page in the answer body, never in a cookie. Logging in checks the origin too, so
another site cannot log a browser into a session of its choosing.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from corral.api.deps import ApiKeysDep, ConsoleSessionsDep, console_session_key, own_origin
from corral.service.console_sessions import COOKIE_NAME, ConsoleSession
from corral.service.errors import InvalidRequest, Unauthorized
from corral.service.records import ApiKeyRecord

router = APIRouter(prefix="/console/api", include_in_schema=False)


class LoginRequest(BaseModel):
    token: str | None = Field(default=None, max_length=256)
    api_key: str | None = Field(default=None, max_length=256)


class SessionInfo(BaseModel):
    key_name: str
    role: str
    csrf: str


def _check_origin(request: Request) -> None:
    origin = request.headers.get("origin")
    if origin is not None and origin != own_origin(request):
        raise Unauthorized(
            f"refused a console login from another origin ({origin!r})", code="forbidden"
        )


def _info(record: ApiKeyRecord, session: ConsoleSession) -> SessionInfo:
    return SessionInfo(key_name=record.name, role=record.role, csrf=session.csrf)


@router.post("/session", response_model=SessionInfo)
async def log_in(
    body: LoginRequest,
    request: Request,
    response: Response,
    sessions: ConsoleSessionsDep,
    api_keys: ApiKeysDep,
) -> SessionInfo:
    """Exchange a one-time login token (or an API key) for a session cookie."""
    _check_origin(request)
    if (body.token is None) == (body.api_key is None):
        raise InvalidRequest("log in with exactly one of 'token' (a login link's) and 'api_key'")
    if body.token is not None:
        api_key = sessions.redeem_token(body.token)
        if api_key is None:
            raise Unauthorized(
                "this login link was already used or has expired: run `corral console` "
                "for a new one, or log in with an API key"
            )
    else:
        api_key = body.api_key or ""
    record = api_keys.verify(api_key)
    cookie, session = sessions.open(api_key)
    response.set_cookie(
        COOKIE_NAME,
        cookie,
        max_age=int(sessions.session_ttl),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return _info(record, session)


@router.get("/session", response_model=SessionInfo)
async def who_am_i(
    request: Request, sessions: ConsoleSessionsDep, api_keys: ApiKeysDep
) -> SessionInfo:
    """The session's key name, role and CSRF token (401 when not logged in)."""
    api_key = console_session_key(request)
    session = sessions.get(request.cookies.get(COOKIE_NAME))
    if api_key is None or session is None:
        raise Unauthorized("not logged in to the console")
    return _info(api_keys.verify(api_key), session)


@router.delete("/session", status_code=204)
async def log_out(request: Request, sessions: ConsoleSessionsDep) -> Response:
    console_session_key(request)  # a logout is a change: the CSRF token and origin are checked
    sessions.close(request.cookies.get(COOKIE_NAME))
    response = Response(status_code=204)
    response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="strict")
    return response
