"""Sandbox records: insert, read, filter, update."""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any

from sqlalchemy import case, func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.records import SandboxRecord
from corral.storage.tables import SandboxRow


def _record(row: SandboxRow) -> SandboxRecord:
    return SandboxRecord(
        id=row.id,
        state=row.state,
        template=row.template,
        cpu=row.cpu,
        memory_mib=row.memory_mib,
        disk_mib=row.disk_mib,
        env=dict(row.env or {}),
        metadata=dict(row.meta or {}),
        created_at=row.created_at,
        updated_at=row.updated_at,
        expires_at=row.expires_at,
        error=row.error,
        slot_index=row.slot_index,
        operation=row.operation,
        secret_keys=list(row.secret_keys or []),
        on_timeout=row.on_timeout or "kill",
        auto_park_idle=row.auto_park_idle,
        auto_wake=bool(row.auto_wake),
        image_path=row.image_path,
        image_mib=row.image_mib or 0,
        parent_id=row.parent_id,
        last_active_at=row.last_active_at,
        pooled=bool(row.pooled),
        network=row.network,
        owner=row.owner,
        net_rx_bytes=row.net_rx_bytes or 0,
        net_rx_packets=row.net_rx_packets or 0,
        net_tx_bytes=row.net_tx_bytes or 0,
        net_tx_packets=row.net_tx_packets or 0,
    )


# Told of every committed insert or update: (the record before, None for an insert; after).
ChangeListener = Callable[[SandboxRecord | None, SandboxRecord], None]


class SandboxRepository:
    """CRUD on the ``sandboxes`` table. Every write commits before returning, then tells the
    ``listeners`` (the service's event stream) what changed; a listener must not raise."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions
        self.listeners: list[ChangeListener] = []

    def _changed(self, before: SandboxRecord | None, record: SandboxRecord) -> None:
        for listener in self.listeners:
            listener(before, record)

    def add(self, record: SandboxRecord) -> None:
        now = time.time()
        with self._sessions.begin() as session:
            session.add(
                SandboxRow(
                    id=record.id,
                    state=record.state,
                    template=record.template,
                    cpu=record.cpu,
                    memory_mib=record.memory_mib,
                    disk_mib=record.disk_mib,
                    env=record.env,
                    meta=record.metadata,
                    created_at=record.created_at or now,
                    updated_at=now,
                    expires_at=record.expires_at,
                    error=record.error,
                    slot_index=record.slot_index,
                    operation=record.operation,
                    secret_keys=record.secret_keys,
                    on_timeout=record.on_timeout,
                    auto_park_idle=record.auto_park_idle,
                    auto_wake=record.auto_wake,
                    image_path=record.image_path,
                    image_mib=record.image_mib,
                    parent_id=record.parent_id,
                    last_active_at=record.last_active_at,
                    pooled=record.pooled,
                    network=record.network,
                    owner=record.owner,
                    net_rx_bytes=record.net_rx_bytes,
                    net_rx_packets=record.net_rx_packets,
                    net_tx_bytes=record.net_tx_bytes,
                    net_tx_packets=record.net_tx_packets,
                )
            )
        self._changed(None, record)

    def get(self, sandbox_id: str) -> SandboxRecord | None:
        with self._sessions() as session:
            row = session.get(SandboxRow, sandbox_id)
            return _record(row) if row else None

    def list(
        self,
        *,
        states: AbstractSet[str] | None = None,
        metadata: dict[str, str] | None = None,
        pooled_in: str | None = None,
    ) -> list[SandboxRecord]:
        """The records in ``states`` (all if None) whose metadata holds ``metadata``, oldest
        first; ``pooled_in``: only the pooled sandboxes of that template (read without
        turning every other row into a record)."""
        with self._sessions() as session:
            query = select(SandboxRow).order_by(SandboxRow.created_at)
            if states:
                query = query.where(SandboxRow.state.in_(states))
            if pooled_in is not None:
                query = query.where(SandboxRow.pooled.is_(True), SandboxRow.template == pooled_in)
            rows = session.scalars(query).all()
            records = [_record(row) for row in rows]
        if metadata:
            records = [
                r for r in records if all(r.metadata.get(k) == v for k, v in metadata.items())
            ]
        return records

    def list_in_or_expiring(
        self, states: AbstractSet[str], expiring_states: AbstractSet[str]
    ) -> builtins.list[SandboxRecord]:
        """The records in ``states``, and those in ``expiring_states`` that have an expiry,
        oldest first (the lifecycle monitor's: a parked sandbox without a TTL needs nothing of
        it, and thousands of them would otherwise be read every second)."""
        with self._sessions() as session:
            query = (
                select(SandboxRow)
                .where(
                    or_(
                        SandboxRow.state.in_(states),
                        SandboxRow.state.in_(expiring_states) & SandboxRow.expires_at.isnot(None),
                    )
                )
                .order_by(SandboxRow.created_at)
            )
            return [_record(row) for row in session.scalars(query).all()]

    def reserved(
        self, active_states: AbstractSet[str], image_states: AbstractSet[str]
    ) -> tuple[float, float, float]:
        """(cpu, memory MiB, disk MiB) the records reserve, summed in SQL: the records in
        ``active_states`` their cpu, memory and disk, those in ``image_states`` their image's
        MiB of disk. No record is read (capacity is asked on every create and import)."""
        active = SandboxRow.state.in_(active_states)
        image = func.coalesce(SandboxRow.image_mib, 0)
        query = select(
            func.coalesce(func.sum(case((active, SandboxRow.cpu), else_=0.0)), 0.0),
            func.coalesce(func.sum(case((active, SandboxRow.memory_mib), else_=0)), 0),
            func.coalesce(
                func.sum(
                    case(
                        (active, SandboxRow.disk_mib),
                        (SandboxRow.state.in_(image_states), image),
                        else_=0,
                    )
                ),
                0,
            ),
        ).where(SandboxRow.state.in_(set(active_states) | set(image_states)))
        with self._sessions() as session:
            cpu, memory, disk = session.execute(query).one()
        return float(cpu), float(memory), float(disk)

    def update(self, sandbox_id: str, **fields: Any) -> SandboxRecord:
        if "metadata" in fields:
            fields["meta"] = fields.pop("metadata")
        with self._sessions.begin() as session:
            row = session.get(SandboxRow, sandbox_id)
            if row is None:
                raise KeyError(sandbox_id)
            before = _record(row)
            for name, value in fields.items():
                setattr(row, name, value)
            row.updated_at = time.time()
            session.flush()
            record = _record(row)
        self._changed(before, record)
        return record

    def prune(self, *, states: AbstractSet[str], ended_before: float) -> builtins.list[str]:
        """Delete the records in ``states`` last changed before ``ended_before`` that hold no
        image on disk; return their ids."""
        with self._sessions.begin() as session:
            rows = session.scalars(
                select(SandboxRow).where(
                    SandboxRow.state.in_(states),
                    SandboxRow.updated_at < ended_before,
                    SandboxRow.image_path.is_(None),
                )
            ).all()
            for row in rows:
                session.delete(row)
            return [row.id for row in rows]

    def delete(self, sandbox_id: str) -> None:
        with self._sessions.begin() as session:
            row = session.get(SandboxRow, sandbox_id)
            if row is not None:
                session.delete(row)
