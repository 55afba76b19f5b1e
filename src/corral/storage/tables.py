"""ORM table definitions. Migrations in ``migrations/versions`` must match these."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class SandboxRow(Base):
    __tablename__ = "sandboxes"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    template: Mapped[str] = mapped_column(String(128))
    cpu: Mapped[float] = mapped_column(Float)
    memory_mib: Mapped[int] = mapped_column(Integer)
    disk_mib: Mapped[int] = mapped_column(Integer)
    env: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    slot_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    operation: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # Added in 0002 (park, fork, snapshots, secrets, automation).
    secret_keys: Mapped[list[str]] = mapped_column(JSON, default=list)
    on_timeout: Mapped[str] = mapped_column(String(8), default="kill")
    auto_park_idle: Mapped[int | None] = mapped_column(Integer, nullable=True)
    auto_wake: Mapped[bool] = mapped_column(Boolean, default=False)
    image_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    image_mib: Mapped[int] = mapped_column(Integer, default=0)
    parent_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    last_active_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # 0004: a ready sandbox waiting in its template's pool
    pooled: Mapped[bool] = mapped_column(Boolean, default=False)
    # 0006: the egress policy, JSON text (network/policy.py)
    network: Mapped[str | None] = mapped_column(Text, nullable=True)
    # 0009: the id of the API key that made it (None: the workspace's own, e.g. a pool's)
    owner: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    # 0011: traffic counted in the slots it has left (network.base.Traffic's fields)
    net_rx_bytes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    net_rx_packets: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    net_tx_bytes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    net_tx_packets: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class ApiKeyRow(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    # 0009: scopes (None: all), expiry, use, revocation, quotas, requests per second
    scopes: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_used_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    quotas: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    rate_limit: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_by: Mapped[str | None] = mapped_column(String(128), nullable=True)


class TemplateRow(Base):
    __tablename__ = "templates"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    image: Mapped[str] = mapped_column(Text)
    cpu: Mapped[float] = mapped_column(Float)
    memory_mib: Mapped[int] = mapped_column(Integer)
    disk_mib: Mapped[int] = mapped_column(Integer)
    env: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[float] = mapped_column(Float)
    # 0003: where the image came from, defaults and ceilings, warm/pool settings
    source: Mapped[str] = mapped_column(Text, default="")
    workdir: Mapped[str | None] = mapped_column(Text, nullable=True)
    user: Mapped[str | None] = mapped_column(String(128), nullable=True)
    start_cmd: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    max_cpu: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_memory_mib: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_disk_mib: Mapped[int | None] = mapped_column(Integer, nullable=True)
    warmup: Mapped[str | None] = mapped_column(Text, nullable=True)
    warm: Mapped[bool] = mapped_column(Boolean, default=False)
    pool: Mapped[int] = mapped_column(Integer, default=0)
    # 0004: the sealed memory image of a warm template (None until warmed)
    warm_image: Mapped[str | None] = mapped_column(Text, nullable=True)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # 0009: the key that built it, and whether members of the workspace may use it
    owner: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    shared: Mapped[bool] = mapped_column(Boolean, default=True)


class SnapshotRow(Base):
    __tablename__ = "snapshots"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(8))
    source_id: Mapped[str] = mapped_column(String(32))
    template: Mapped[str] = mapped_column(String(128))
    cpu: Mapped[float] = mapped_column(Float)
    memory_mib: Mapped[int] = mapped_column(Integer)
    disk_mib: Mapped[int] = mapped_column(Integer)
    env: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    image_path: Mapped[str] = mapped_column(Text)
    size_mib: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    # 0004: the image the source sandbox ran on (restores must use the same one)
    image: Mapped[str | None] = mapped_column(Text, nullable=True)
    # 0009: the key that took it
    owner: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)


class TemplatePinRow(Base):
    """The image a sandbox was made from, kept while the sandbox lives (so rebuilding its
    template's tag never pulls the image from under it), with the exec defaults it was given."""

    __tablename__ = "template_pins"

    sandbox_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    template: Mapped[str] = mapped_column(String(128), index=True)
    image: Mapped[str] = mapped_column(Text)
    workdir: Mapped[str | None] = mapped_column(Text, nullable=True)
    user: Mapped[str | None] = mapped_column(String(128), nullable=True)


class TrustedKeyRow(Base):
    """0005: a public key (``ed25519:<base64>``) whose signed exports are restored with memory."""

    __tablename__ = "trusted_keys"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    public_key: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[float] = mapped_column(Float)


class ProjectServiceRow(Base):
    """0006: a service of the project, a name every sandbox in a project mode resolves."""

    __tablename__ = "project_services"

    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    address: Mapped[str] = mapped_column(String(15))
    ports: Mapped[list[int]] = mapped_column(JSON, default=list)
    created_at: Mapped[float] = mapped_column(Float)
    # 0010: a service that is a port of this sandbox (``address`` is then its virtual address)
    sandbox_id: Mapped[str | None] = mapped_column(String(32), nullable=True)


class WorkspacePolicyRow(Base):
    """0009: the workspace policy, one row (``name`` = ``workspace``) holding its JSON."""

    __tablename__ = "workspace_policy"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    body: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    updated_at: Mapped[float] = mapped_column(Float)


class AuditRow(Base):
    """0009: one entry of the audit log. Triggers in the migration refuse UPDATE and DELETE."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    key_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    key_name: Mapped[str | None] = mapped_column(String(128), nullable=True)
    action: Mapped[str] = mapped_column(String(128))
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(Text)
    target: Mapped[str | None] = mapped_column(String(253), nullable=True, index=True)
    status: Mapped[int] = mapped_column(Integer)
    result: Mapped[str] = mapped_column(String(32))
    source: Mapped[str | None] = mapped_column(String(64), nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)


class SandboxPortRow(Base):
    """0008: a port of a sandbox opened to inbound traffic through the daemon."""

    __tablename__ = "sandbox_ports"

    sandbox_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("sandboxes.id", ondelete="CASCADE"), primary_key=True
    )
    port: Mapped[int] = mapped_column(Integer, primary_key=True)
    public: Mapped[bool] = mapped_column(Boolean, default=False)
    nonce: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)


class SecretRow(Base):
    """0007: a brokered secret. ``sealed`` is the value encrypted (AES-GCM, ``storage/sealing.py``)
    with the key in ``DATA/secrets.key``; nothing else in the store holds a value."""

    __tablename__ = "secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    preset: Mapped[str] = mapped_column(String(16))
    hosts: Mapped[list[str]] = mapped_column(JSON, default=list)
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    sealed: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class SecretBindingRow(Base):
    """0007: a secret given to a sandbox, and the placeholder the sandbox holds for it."""

    __tablename__ = "secret_bindings"

    sandbox_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    secret: Mapped[str] = mapped_column(String(64), primary_key=True)
    placeholder: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)


class SecretAuditRow(Base):
    """0007: one injection: which sandbox used which secret on which request (never the value)."""

    __tablename__ = "secret_audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    sandbox_id: Mapped[str] = mapped_column(String(32), index=True)
    secret: Mapped[str] = mapped_column(String(64), index=True)
    host: Mapped[str] = mapped_column(String(253))
    method: Mapped[str] = mapped_column(String(16))
    path: Mapped[str] = mapped_column(Text)
