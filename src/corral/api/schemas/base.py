"""What every part of the HTTP API shares: the error body, the names of network modes and sandbox
states, the console login token.

Part of the HTTP API's contract (``corral.api.schemas``): field names are stable; new fields may
be added, none removed or renamed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

__all__ = ["ConsoleLoginToken", "ErrorBody", "NetworkModeName", "SandboxState"]


NetworkModeName = Literal["project_internet", "internet", "project", "airgapped"]


SandboxState = Literal["creating", "running", "parked", "stopped", "killed", "error"]


class ErrorBody(BaseModel):
    """Every error answer: a machine code and a message that says what to do."""

    code: str = Field(examples=["not_found"])
    message: str


class ConsoleLoginToken(BaseModel):
    token: str = Field(description="good for one login, until expires_at")
    path: str = Field(description="the console's login link, relative to the daemon's URL")
    expires_at: float = Field(description="Unix time")
    key_name: str = Field(description="the key (and so the role) the console will act as")
