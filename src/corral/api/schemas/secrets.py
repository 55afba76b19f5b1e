"""Secrets on the wire: set and rotate, what a listing shows (never a value), and the audit log.

Part of the HTTP API's contract (``corral.api.schemas``): field names are stable; new fields may
be added, none removed or renamed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Secret", "SecretAuditEntry", "SecretList", "SecretLog", "SecretRotate", "SecretSet"]


class SecretSet(BaseModel):
    """Store (or replace) a brokered secret. ``value`` is never returned or logged."""

    model_config = ConfigDict(extra="forbid")

    value: str = Field(min_length=1, max_length=8192, repr=False)
    preset: str = Field(default="http", description="github, openai, anthropic, http or aws")
    hosts: list[str] | None = Field(
        default=None, max_length=32, description="hosts it is bound to (default: the preset's)"
    )
    header: str | None = Field(default=None, description="only this header carries it")
    scheme: str | None = Field(default=None, description="with header: e.g. Bearer")
    query: bool | None = Field(default=None, description="replace it in query strings")
    body: bool | None = Field(default=None, description="replace it in request bodies")


class SecretRotate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: str = Field(min_length=1, max_length=8192, repr=False)


class Secret(BaseModel):
    """A brokered secret, never its value."""

    name: str
    preset: str
    hosts: list[str]
    header: str | None = None
    scheme: str | None = None
    query: bool = True
    body: bool = False
    created_at: float
    updated_at: float
    last_used_at: float | None = None
    sandboxes: list[str] = Field(default_factory=list, description="sandboxes bound to it")


class SecretList(BaseModel):
    secrets: list[Secret]


class SecretAuditEntry(BaseModel):
    """One injection: who used which secret where (never the value or the query string)."""

    at: float
    sandbox_id: str
    secret: str
    host: str
    method: str
    path: str


class SecretLog(BaseModel):
    entries: list[SecretAuditEntry]
