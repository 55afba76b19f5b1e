"""Console login links: a one-time token that the web console exchanges for a session."""

from __future__ import annotations

from fastapi import APIRouter

from corral.api import schemas
from corral.api.deps import ConsoleSessionsDep, PresentedKeyDep, PrincipalDep

router = APIRouter(prefix="/v1/console", tags=["console"])


@router.post(
    "/login-tokens",
    operation_id="create_console_login_token",
    status_code=201,
    response_model=schemas.ConsoleLoginToken,
)
async def create_login_token(
    sessions: ConsoleSessionsDep,
    key: PrincipalDep,
    presented: PresentedKeyDep,
) -> schemas.ConsoleLoginToken:
    """A token good for one console login, within a short time, as the calling key (and its
    role); open ``/console/#login=TOKEN`` to use it."""
    assert presented is not None  # require_key has verified it
    token, expires_at = sessions.issue_token(presented)
    return schemas.ConsoleLoginToken(
        token=token, path=f"/console/#login={token}", expires_at=expires_at, key_name=key.name
    )
