"""Snapshots on the wire: create and list, export/import with their signers, and the trust list of
signing keys.

Part of the HTTP API's contract (``corral.api.schemas``): field names are stable; new fields may
be added, none removed or renamed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from corral.api.schemas.sandboxes import Sandbox

__all__ = [
    "ImportResult",
    "ImportSigner",
    "Snapshot",
    "SnapshotCreate",
    "SnapshotList",
    "TrustList",
    "TrustedKey",
    "TrustedKeyCreate",
    "WorkspaceKey",
]


class SnapshotCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    fs_only: bool = Field(default=False, description="files only, no memory or processes")
    allow_secrets: bool = Field(
        default=False, description="allow a files-only snapshot of a secret-bearing sandbox"
    )


class Snapshot(BaseModel):
    name: str
    kind: Literal["memory", "fs"]
    source_id: str
    template: str
    cpu: float
    memory_mib: int
    disk_mib: int
    size_mib: int
    created_at: float


class SnapshotList(BaseModel):
    snapshots: list[Snapshot]


class ImportSigner(BaseModel):
    """Who signed an imported export: a trusted key's name, or none (an ``fs_only`` import of
    an untrusted export)."""

    name: str | None = None
    public_key: str | None = None


class ImportResult(BaseModel):
    kind: Literal["sandbox", "snapshot"]
    sandbox: Sandbox | None = None
    snapshot: Snapshot | None = None
    signer: ImportSigner | None = None


class TrustedKey(BaseModel):
    name: str
    public_key: str = Field(description="ed25519:<base64 of the raw 32-byte key>")
    created_at: float


class TrustedKeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=64)
    public_key: str = Field(
        max_length=4096,
        description="ed25519:<base64>, as `corral trust show` prints it, or a PEM public key",
    )


class TrustList(BaseModel):
    public_key: str = Field(description="this workspace's own key (always trusted)")
    keys: list[TrustedKey]


class WorkspaceKey(BaseModel):
    public_key: str = Field(description="this workspace's key: give it to `corral trust add`")
