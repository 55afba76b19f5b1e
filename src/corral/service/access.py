"""Who is calling and what they may do: roles, scopes, ownership. The one place that decides.

Every request an edge (the API, the E2B front) serves runs *as* a ``Principal``, the verified API
key behind it, set with ``acting_as`` for the request's task (a context variable, so services need
no extra argument and background work started by a request keeps its caller). Work nobody asked
for (timers, pools, reconciliation) runs as ``SYSTEM``, which may do everything.

Three questions, each answered here and nowhere else:

- **may this key do this kind of thing?** ``authorize(permission)``: a permission is a scope (a
  family of resources: ``sandboxes``, ``templates``, ...) and a level (``read``, ``write``,
  ``admin``). A viewer reads; a member reads and writes sandboxes, snapshots and templates and
  reads the workspace; an admin does everything, including keys, policy, services, trust, imports,
  audit and metrics. A key limited to some scopes is refused (403 ``forbidden``) the others.
- **may this key see this object?** ``visible(owner)``: a member sees only what it made (and
  templates marked shared); asking for another's answers 404 exactly as a missing id does
  (``hide``), so ids do not leak. Admins and viewers see everything.
- **who owns what is being made?** ``new_owner()``: the acting key's id (None for ``SYSTEM``).

Invariant: nothing here reads the store; callers pass owners in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Literal

from corral.service.errors import CorralError, NotFound

__all__ = [
    "LEVELS",
    "ROLES",
    "SCOPES",
    "SYSTEM",
    "Forbidden",
    "Permission",
    "Principal",
    "acting",
    "acting_as",
    "as_system",
    "authorize",
    "hide",
    "may",
    "new_owner",
    "require_owner",
    "reset",
    "visible",
]

ROLES = ("admin", "member", "viewer")
Level = Literal["read", "write", "admin"]
LEVELS: tuple[Level, ...] = ("read", "write", "admin")
# The families of resources a key's scopes may name.
SCOPES = (
    "sandboxes",  # sandboxes and everything inside one: processes, files, network, fork, park
    "templates",
    "snapshots",  # snapshots, exports and imports
    "workspace",  # capacity, policy
    "events",
    "keys",
    "audit",
    "metrics",
    "services",
    "secrets",
    "trust",
)
# What each role may do: the levels it has in each scope (absent: nothing).
_GRANTS: dict[str, dict[str, frozenset[str]]] = {
    "admin": {scope: frozenset(LEVELS) for scope in SCOPES},
    "member": {
        "sandboxes": frozenset({"read", "write"}),
        "templates": frozenset({"read", "write"}),
        "snapshots": frozenset({"read", "write"}),
        "workspace": frozenset({"read"}),
        "events": frozenset({"read"}),
    },
    "viewer": {
        "sandboxes": frozenset({"read"}),
        "templates": frozenset({"read"}),
        "snapshots": frozenset({"read"}),
        "workspace": frozenset({"read"}),
        "events": frozenset({"read"}),
    },
}


class Forbidden(CorralError):
    """The key is valid but may not do this (its role or scopes)."""

    code = "forbidden"


@dataclass(frozen=True)
class Permission:
    """What a call needs: ``level`` in ``scope``."""

    scope: str
    level: Level

    def __str__(self) -> str:
        return f"{self.level} {self.scope}"


@dataclass(frozen=True)
class Principal:
    """The caller: an API key's id, name, role and limits (never the key itself)."""

    key_id: str | None
    name: str
    role: str
    scopes: frozenset[str] | None = None  # None: every scope
    quotas: dict[str, float] = field(default_factory=dict)

    @property
    def sees_everything(self) -> bool:
        return self.role in ("admin", "viewer")

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


SYSTEM = Principal(key_id=None, name="system", role="admin")

_acting: ContextVar[Principal] = ContextVar("corral_acting", default=SYSTEM)


def acting() -> Principal:
    """The principal the current task acts for (``SYSTEM`` outside any request)."""
    return _acting.get()


def acting_as(principal: Principal) -> Token[Principal]:
    """Act as ``principal`` from here on in this task (and the tasks it starts)."""
    return _acting.set(principal)


def reset(token: Token[Principal]) -> None:
    """Act again as before the ``acting_as`` that gave ``token``."""
    _acting.reset(token)


@contextlib.contextmanager
def as_system() -> Iterator[None]:
    """Run a block as the workspace itself (work that no caller owns, e.g. refilling a pool)."""
    token = _acting.set(SYSTEM)
    try:
        yield
    finally:
        _acting.reset(token)


SELF = "self"  # what a key may always ask about itself, whatever its role and scopes


def may(principal: Principal, permission: Permission) -> bool:
    if permission.scope == SELF:
        return principal.role in _GRANTS
    if principal.scopes is not None and permission.scope not in principal.scopes:
        return False
    return permission.level in _GRANTS.get(principal.role, {}).get(permission.scope, frozenset())


def authorize(permission: Permission, principal: Principal | None = None) -> None:
    """Raise Forbidden unless the acting principal (or ``principal``) has ``permission``."""
    who = principal or acting()
    if may(who, permission):
        return
    if who.scopes is not None and permission.scope not in who.scopes:
        raise Forbidden(
            f"API key {who.name!r} is limited to the scopes {', '.join(sorted(who.scopes))}; "
            f"this call needs {permission}; ask an admin for a key with that scope"
        )
    raise Forbidden(
        f"API key {who.name!r} has role {who.role!r}, which may not {permission.level} "
        f"{permission.scope}; ask an admin"
    )


def visible(owner: str | None, *, shared: bool = False, principal: Principal | None = None) -> bool:
    """Whether the acting principal may see an object made by key ``owner``."""
    who = principal or acting()
    return who.sees_everything or shared or (who.key_id is not None and owner == who.key_id)


def hide(owner: str | None, not_found: str, *, shared: bool = False) -> None:
    """Raise NotFound(``not_found``), the very answer a missing object gets, unless visible."""
    if not visible(owner, shared=shared):
        raise NotFound(not_found)


def require_owner(owner: str | None, what: str) -> None:
    """For changes: a member may change only what it made, even what it may see (a shared
    template); admins may change anything."""
    who = acting()
    if who.is_admin or (who.key_id is not None and owner == who.key_id):
        return
    raise Forbidden(f"{what} belongs to another API key: key {who.name!r} may not change it")


def new_owner() -> str | None:
    """The owner of an object the acting principal makes now."""
    return acting().key_id
