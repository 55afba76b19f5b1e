"""Admission: whether a request is valid and fits the workspace, decided in one place.

``resolve`` turns a create request into resources and an expiry (or one InvalidRequest naming
every problem); the ``admit*`` methods check capacity and commit what takes it (a new record, a
wake's reservation, an imported parked sandbox, a build sandbox's hold) under one workspace-wide
lock, so two requests never take the same free MiB. Boots (creates, wakes) must also fit the
host as it is now (``host_room.py``): a create is refused up front, never started and starved.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence

from corral.config import Settings
from corral.runtime.base import Resources
from corral.service.audit import note_target
from corral.service.capacity import (
    RESERVING_ALL,
    RESERVING_IMAGE,
    CapacityModel,
    CapacityReport,
    Reserved,
    reserved_by,
)
from corral.service.errors import CapacityExceeded, InvalidRequest
from corral.service.model import (
    LIVE_STATES,
    MIN_CPU,
    MIN_DISK_MIB,
    MIN_MEMORY_MIB,
    TIMEOUT_ACTIONS,
    CreateRequest,
    Operation,
    SandboxState,
)
from corral.service.policy import PolicyService
from corral.service.quotas import Usage, check_quotas, usage_of
from corral.service.sandboxes.host_room import HostRoom
from corral.service.sandboxes.policy import NetworkPolicies
from corral.service.templates import TemplateService
from corral.storage import Database, SandboxRecord
from corral.storage.records import TemplatePin

__all__ = ["Admission"]

_BOOTING = frozenset({SandboxState.CREATING, SandboxState.RUNNING})


class Admission:
    """Validation and capacity admission of sandboxes (and build sandboxes' holds).

    Locking: ``lock`` is held for every check-and-commit, and only for that."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        runtime_name: str,
        templates: TemplateService,
        policies: NetworkPolicies,
        workspace_policy: PolicyService,
    ) -> None:
        self.settings = settings
        self.db = db
        self.runtime_name = runtime_name
        self.templates = templates
        self.policies = policies
        self.workspace_policy = workspace_policy
        self.model = CapacityModel(settings)
        self.host = HostRoom(settings.host_reserve_memory_mib)
        self.lock = asyncio.Lock()

    def _snapshot_mib(self) -> int:
        return self.db.snapshots.total_mib()

    def _reserved(self) -> Reserved:
        # Summed by the store: reading every record would cost ~50 ms of CPU per 1,000.
        return Reserved(*self.db.sandboxes.reserved(RESERVING_ALL, RESERVING_IMAGE))

    def _live(self) -> list[SandboxRecord]:
        return self.db.sandboxes.list(states=LIVE_STATES)

    def capacity(self) -> CapacityReport:
        return self.model.report(self._reserved(), snapshot_mib=self._snapshot_mib())

    def usage(self, owner: str) -> Usage:
        """What the key ``owner``'s live sandboxes hold now (what its quotas count)."""
        return usage_of(self._live(), owner)

    def resolve(self, request: CreateRequest) -> tuple[float, int, int, float | None]:
        """Resources and expiry for a request, or InvalidRequest naming every problem."""
        policy = self.workspace_policy.current()
        template = self.templates.get(request.template)
        self.workspace_policy.check_template(template.name)
        self.workspace_policy.check_runtime(self.runtime_name)
        self.workspace_policy.check_rules(request.allow)
        cpu = request.cpu if request.cpu is not None else template.cpu
        memory = request.memory_mib if request.memory_mib is not None else template.memory_mib
        disk = request.disk_mib if request.disk_mib is not None else template.disk_mib
        self.templates.check_ceilings(template, cpu=cpu, memory_mib=memory, disk_mib=disk)
        problems = []
        if not MIN_CPU <= cpu <= policy.max_cpu:
            problems.append(f"cpu {cpu:g} is outside {MIN_CPU:g}..{policy.max_cpu:g} vCPUs")
        if not MIN_MEMORY_MIB <= memory <= policy.max_memory_mib:
            problems.append(
                f"memory {memory} MiB is outside {MIN_MEMORY_MIB}..{policy.max_memory_mib} MiB"
            )
        if not MIN_DISK_MIB <= disk <= policy.max_disk_mib:
            problems.append(f"disk {disk} MiB is outside {MIN_DISK_MIB}..{policy.max_disk_mib} MiB")
        ttl = request.ttl_seconds
        if ttl is None:
            ttl = policy.default_ttl_seconds
        elif not 0 < ttl <= policy.max_ttl_seconds:
            problems.append(f"ttl {ttl} s is outside 1..{policy.max_ttl_seconds} s")
        for key in [*request.env, *request.secret_env]:
            if not key or "=" in key or "\0" in key:
                problems.append(f"env name {key!r} is not valid")
        both = sorted(set(request.env) & set(request.secret_env))
        if both:
            problems.append(f"env names given both plain and secret: {', '.join(both)}")
        if request.on_timeout not in TIMEOUT_ACTIONS:
            problems.append(f"on_timeout must be one of {', '.join(TIMEOUT_ACTIONS)}")
        if request.auto_park_idle is not None and request.auto_park_idle <= 0:
            problems.append("auto_park_idle must be a positive number of seconds")
        try:
            self.policies.build(request.network, request.allow, request.deny)
        except InvalidRequest as exc:
            problems.append(exc.message)
        if problems:
            raise InvalidRequest("invalid sandbox request: " + "; ".join(problems))
        expires = time.time() + ttl if ttl else None
        return cpu, memory, disk, expires

    def check_quotas(
        self,
        live: Iterable[SandboxRecord] | Callable[[], Iterable[SandboxRecord]],
        adding: Iterable[SandboxRecord],
        what: str,
    ) -> None:
        """Raise QuotaExceeded if ``adding`` (new or changed records, in their new state) would
        take an owner over a quota of its key. ``live``: the live records, or what reads them
        (called only if some owner has quotas). Callers hold ``lock``."""
        adding = list(adding)
        changed = {r.id for r in adding}
        read: list[SandboxRecord] | None = None
        for owner in {r.owner for r in adding if r.owner is not None}:
            key = self.db.api_keys.get(owner)
            if key is None or not key.quotas:
                continue
            if read is None:
                read = list(live() if callable(live) else live)
            before = usage_of(read, owner)
            after = usage_of([*(r for r in read if r.id not in changed), *adding], owner)
            need = type(before)(
                **{q: after.get(q) - before.get(q) for q in vars(before)}  # the growth
            )
            check_quotas(key.name, key.quotas, before, need, what)

    async def admit_change(self, record: SandboxRecord, what: str) -> None:
        """Check the quotas of ``record`` in its new state (a park: its image counts where its
        memory did), atomically with other admissions."""
        async with self.lock:
            self.check_quotas(self._live, [record], what)

    async def admit(
        self, records: Sequence[SandboxRecord], pins: Sequence[TemplatePin] = ()
    ) -> None:
        """Check capacity and quotas for new records and insert them, atomically with other
        admissions; ``pins`` (the images they are made from) are recorded in the same commit."""
        async with self.lock:
            what = "this sandbox" if len(records) == 1 else f"these {len(records)} sandboxes"
            for record in records[:1]:
                note_target(record.id)  # the audit entry of the call names what it made
            self.check_quotas(self._live, records, what)
            self.model.admit(
                self._reserved(),
                cpu=sum(r.cpu for r in records),
                memory_mib=sum(r.memory_mib for r in records),
                disk_mib=sum(r.disk_mib for r in records),
                snapshot_mib=self._snapshot_mib(),
            )
            self.host.check(sum(1 for r in records if r.state in _BOOTING), what)
            self.db.sandboxes.add_all(records, pins)  # one commit: all are admitted, or none

    async def admit_wake(self, record: SandboxRecord) -> None:
        """Reserve cpu and memory for a parked sandbox about to wake (its image still counts
        on disk until it is removed), and mark it running/waking: from then on it reserves
        like a running sandbox."""
        async with self.lock:
            current = self.db.sandboxes.get(record.id)
            self.check_quotas(
                lambda: [*(r for r in self._live() if r.id != record.id), record],
                [dataclasses.replace(record, state=SandboxState.RUNNING)],
                f"waking sandbox {record.id}",
            )
            self.model.admit(
                self._reserved() - reserved_by([current] if current else []),
                cpu=record.cpu,
                memory_mib=record.memory_mib,
                disk_mib=record.disk_mib + record.image_mib,
                snapshot_mib=self._snapshot_mib(),
            )
            self.host.check(1, f"waking sandbox {record.id}")
            self.db.sandboxes.update(
                record.id, state=SandboxState.RUNNING, operation=Operation.WAKING
            )

    async def admit_parked(self, record: SandboxRecord, size_mib: int) -> None:
        """Insert an imported parked sandbox whose image takes ``size_mib`` of disk."""
        async with self.lock:
            self.check_quotas(self._live, [record], "this import")
            report = self.capacity()
            if size_mib > report.disk.free:
                raise CapacityExceeded(
                    f"importing needs {size_mib} MiB of disk and {report.disk.free:g} MiB is free"
                )
            self.db.sandboxes.add(record)

    async def hold(self, key: str, resources: Resources, what: str) -> None:
        """Reserve ``resources`` for something that is not a sandbox record (a template build's
        sandbox) until ``unhold(key)``; raises CapacityExceeded, naming ``what``, if they do
        not fit."""
        async with self.lock:
            try:
                self.model.admit(
                    self._reserved(),
                    cpu=resources.cpu,
                    memory_mib=resources.memory_mib,
                    disk_mib=resources.disk_mib,
                    snapshot_mib=self._snapshot_mib(),
                )
            except CapacityExceeded as exc:
                raise CapacityExceeded(f"{what} does not fit: {exc.message}") from exc
            self.model.held[key] = (resources.cpu, resources.memory_mib, resources.disk_mib)

    def unhold(self, key: str) -> None:
        self.model.held.pop(key, None)
