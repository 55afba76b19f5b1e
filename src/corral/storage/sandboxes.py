"""Sandbox records: insert, read, filter, update."""

from __future__ import annotations

import builtins
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from corral.storage.raw import fetch_all, json_or, transaction
from corral.storage.records import SandboxRecord, TemplatePin
from corral.storage.tables import SandboxRow, TemplatePinRow


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


# The table's columns in SandboxRecord's field order, read by plain SQL on the engine's pooled
# DBAPI connection: one record read through the ORM (a session, identity map, JSON and type
# processors) costs ~0.4 ms of CPU, by SQL ~0.02 ms, and ``get`` is the daemon's hottest read
# (every exec, file call and lookup). Writes stay on the ORM. ``_from_sql`` decodes what the
# ORM's types would: JSON text (``env``, ``metadata``, ``secret_keys``) and 0/1 booleans.
_COLUMNS = (
    "id, state, template, cpu, memory_mib, disk_mib, env, metadata, created_at, updated_at,"
    " expires_at, error, slot_index, operation, secret_keys, on_timeout, auto_park_idle,"
    " auto_wake, image_path, image_mib, parent_id, last_active_at, pooled, network, owner,"
    " net_rx_bytes, net_rx_packets, net_tx_bytes, net_tx_packets"
)


def _from_sql(row: tuple[Any, ...]) -> SandboxRecord:
    (
        id_, state, template, cpu, memory_mib, disk_mib, env, meta, created_at, updated_at,
        expires_at, error, slot_index, operation, secret_keys, on_timeout, auto_park_idle,
        auto_wake, image_path, image_mib, parent_id, last_active_at, pooled, network, owner,
        rx_bytes, rx_packets, tx_bytes, tx_packets,
    ) = row  # fmt: skip
    return SandboxRecord(
        id=id_,
        state=state,
        template=template,
        cpu=float(cpu),
        memory_mib=memory_mib,
        disk_mib=disk_mib,
        env=dict(json_or(env, {})),
        metadata=dict(json_or(meta, {})),
        created_at=float(created_at),
        updated_at=float(updated_at),
        expires_at=None if expires_at is None else float(expires_at),
        error=error,
        slot_index=slot_index,
        operation=operation,
        secret_keys=list(json_or(secret_keys, [])),
        on_timeout=on_timeout or "kill",
        auto_park_idle=auto_park_idle,
        auto_wake=bool(auto_wake),
        image_path=image_path,
        image_mib=image_mib or 0,
        parent_id=parent_id,
        last_active_at=None if last_active_at is None else float(last_active_at),
        pooled=bool(pooled),
        network=network,
        owner=owner,
        net_rx_bytes=rx_bytes or 0,
        net_rx_packets=rx_packets or 0,
        net_tx_bytes=tx_bytes or 0,
        net_tx_packets=tx_packets or 0,
    )


# What ``update`` may set (``id`` is the key; ``updated_at`` it sets itself), and how.
_UPDATABLE = frozenset(name.strip() for name in _COLUMNS.split(",")) - {"id", "updated_at"}
_JSON_FIELDS = frozenset({"env", "metadata", "secret_keys"})
_BOOL_FIELDS = frozenset({"auto_wake", "pooled"})


def _to_sql(name: str, value: Any) -> Any:
    if name in _JSON_FIELDS:
        return None if value is None else json.dumps(value)
    if name in _BOOL_FIELDS:
        return None if value is None else int(bool(value))
    return value


# Told of every committed insert or update: (the record before, None for an insert; after).
ChangeListener = Callable[[SandboxRecord | None, SandboxRecord], None]


class SandboxRepository:
    """CRUD on the ``sandboxes`` table. Every write commits before returning, then tells
    ``on_change`` (the service's event stream) what changed; it must not raise."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        engine: Engine,
        on_change: ChangeListener | None = None,
    ) -> None:
        self._sessions = sessions
        self._engine = engine
        self._on_change = on_change

    def _select(self, where: str, params: tuple[Any, ...]) -> builtins.list[SandboxRecord]:
        rows = fetch_all(self._engine, f"SELECT {_COLUMNS} FROM sandboxes {where}", params)
        return [_from_sql(row) for row in rows]

    def _changed(self, before: SandboxRecord | None, record: SandboxRecord) -> None:
        if self._on_change is not None:
            self._on_change(before, record)

    def add(self, record: SandboxRecord) -> None:
        self.add_all([record])

    def add_all(self, records: Sequence[SandboxRecord], pins: Sequence[TemplatePin] = ()) -> None:
        """Insert ``records``, and record ``pins`` (their images, as ``TemplateRepository.pin``
        does), in one transaction (one durable commit for all, or none)."""
        now = time.time()
        with self._sessions.begin() as session:
            session.add_all(
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
                for record in records
            )
            for pin in pins:
                session.merge(TemplatePinRow(**dataclasses.asdict(pin)))
        for record in records:
            self._changed(None, record)

    def get(self, sandbox_id: str) -> SandboxRecord | None:
        found = self._select("WHERE id = ?", (sandbox_id,))
        return found[0] if found else None

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
        clauses: builtins.list[str] = []
        params: builtins.list[Any] = []
        if states:
            clauses.append(f"state IN ({', '.join('?' * len(states))})")
            params.extend(sorted(states))
        if pooled_in is not None:
            clauses.append("pooled = 1 AND template = ?")
            params.append(pooled_in)
        where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
        records = self._select(where + "ORDER BY created_at", tuple(params))
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
        always, expiring = sorted(states), sorted(expiring_states)
        where = (
            f"WHERE state IN ({', '.join('?' * len(always))}) OR (expires_at IS NOT NULL AND"
            f" state IN ({', '.join('?' * len(expiring))})) ORDER BY created_at"
        )
        return self._select(where, (*always, *expiring))

    def reserved(
        self, active_states: AbstractSet[str], image_states: AbstractSet[str]
    ) -> tuple[float, float, float]:
        """(cpu, memory MiB, disk MiB) the records reserve, summed in SQL: the records in
        ``active_states`` their cpu, memory and disk, those in ``image_states`` their image's
        MiB of disk. No record is read (capacity is asked on every create and import)."""
        # By plain SQL: through the ORM, building and compiling this query took ~3 ms of CPU
        # per call at load 8, on the path of every park (its space check), wake and create.
        active, image = sorted(active_states), sorted(image_states)
        is_active = f"state IN ({', '.join('?' * len(active))})"
        is_image = f"state IN ({', '.join('?' * len(image))})"
        query = (
            f"SELECT COALESCE(SUM(CASE WHEN {is_active} THEN cpu ELSE 0.0 END), 0.0), "
            f"COALESCE(SUM(CASE WHEN {is_active} THEN memory_mib ELSE 0 END), 0), "
            f"COALESCE(SUM(CASE WHEN {is_active} THEN disk_mib "
            f"WHEN {is_image} THEN COALESCE(image_mib, 0) ELSE 0 END), 0) "
            f"FROM sandboxes WHERE {is_active} OR {is_image}"
        )
        params = (*active, *active, *active, *image, *active, *image)
        ((cpu, memory, disk),) = fetch_all(self._engine, query, params)
        return float(cpu), float(memory), float(disk)

    def update(self, sandbox_id: str, **fields: Any) -> SandboxRecord:
        """Set ``fields`` (SandboxRecord's names) and ``updated_at`` in one transaction that
        also reads the record before; commit (``synchronous=FULL``, as every write), then tell
        the listeners. By plain SQL like the reads: through the ORM the claim of a pooled
        sandbox spent more in this call than in the commit's fsync."""
        unknown = set(fields) - _UPDATABLE
        if unknown:
            raise TypeError(f"not sandbox record fields: {', '.join(sorted(unknown))}")
        now = time.time()
        names = [*fields, "updated_at"]
        values = [_to_sql(name, value) for name, value in fields.items()]
        with transaction(self._engine, immediate=True) as cursor:
            cursor.execute(f"SELECT {_COLUMNS} FROM sandboxes WHERE id = ?", (sandbox_id,))
            row = cursor.fetchone()
            if row is None:
                raise KeyError(sandbox_id)
            assignments = ", ".join(f"{name} = ?" for name in names)
            cursor.execute(
                f"UPDATE sandboxes SET {assignments} WHERE id = ?", (*values, now, sandbox_id)
            )
        before = _from_sql(row)
        record = dataclasses.replace(before, **fields, updated_at=now)
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
