"""The workspace's event stream: state changes of sandboxes (and template builds) as they happen.

``EventBus.publish`` hands each event to every subscriber that may see it (a member: its own
sandboxes and templates; admins and viewers: everything). Sandbox events come from the store's
change callback (``Database(on_sandbox_change=...)``), so every state change is seen whichever
service made it. Each subscriber has a bounded queue: one that falls behind by more than
``QUEUE_LIMIT`` events loses the oldest and is told so with a ``lagged`` event (the daemon never
waits on a slow reader).

Kinds: ``created`` (a new record), ``running``, ``parked``, ``woken`` (parked -> running),
``forked`` (a fork's child running), ``killed``, ``stopped``, ``error``, and ``build`` for
template build progress.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any

from corral.service import access
from corral.service.model import SandboxState
from corral.storage import SandboxRecord

QUEUE_LIMIT = 1000
# The state changes that are events of their own (named after the state); creating is "created".
_STATE_KINDS = frozenset(SandboxState) - {SandboxState.CREATING}


@dataclass(frozen=True)
class Event:
    id: int
    kind: str
    at: float
    sandbox_id: str | None = None
    template: str | None = None
    state: str | None = None
    owner: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("owner")
        return {k: v for k, v in data.items() if v not in (None, {})}


def sandbox_event_kind(before: SandboxRecord | None, record: SandboxRecord) -> str | None:
    """The event a change from ``before`` to ``record`` is, or None (no state change). A
    sandbox claimed from a template's ready pool is ``created`` for its new owner."""
    if before is None or (before.pooled and not record.pooled):
        return "created"
    before_state = before.state
    if before_state == record.state:
        return None
    if record.state == SandboxState.RUNNING and before_state == SandboxState.PARKED:
        return "woken"
    if (
        record.state == SandboxState.RUNNING
        and record.parent_id
        and before_state == SandboxState.CREATING
    ):
        return "forked"
    return record.state if record.state in _STATE_KINDS else None


class Subscription:
    """One reader's queue of events, filtered by what its principal may see."""

    def __init__(self, bus: EventBus, principal: access.Principal) -> None:
        self._bus = bus
        self.principal = principal
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self.lagged = 0

    def offer(self, event: Event) -> None:
        if not access.visible(event.owner, principal=self.principal):
            return
        if self.queue.qsize() >= QUEUE_LIMIT:
            self.queue.get_nowait()
            self.lagged += 1
        self.queue.put_nowait(event)

    async def next(self, timeout: float) -> Event | None:
        """The next event, a ``lagged`` event if some were lost, or None after ``timeout``."""
        if self.lagged:
            lost, self.lagged = self.lagged, 0
            return self._bus.make("lagged", detail={"lost": lost})
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None

    def close(self) -> None:
        self._bus.unsubscribe(self)


class EventBus:
    """Fan-out of events to subscribers; event-loop only (store listeners may run in worker
    threads, so they hand over with ``call_soon_threadsafe``)."""

    def __init__(self) -> None:
        self._subscribers: set[Subscription] = set()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.published = 0

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def make(self, kind: str, **fields: Any) -> Event:
        return Event(id=next(self._ids), kind=kind, at=time.time(), **fields)

    def subscribe(self, principal: access.Principal) -> Subscription:
        subscription = Subscription(self, principal)
        self._subscribers.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscribers.discard(subscription)

    def publish(self, event: Event) -> None:
        self.published += 1
        for subscription in list(self._subscribers):
            subscription.offer(event)

    def publish_threadsafe(self, event: Event) -> None:
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            self.publish(event)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(self.publish, event)

    def sandbox_changed(self, before: SandboxRecord | None, record: SandboxRecord) -> None:
        """The store's change listener: publish what the change means, if anything."""
        if record.pooled:
            return
        kind = sandbox_event_kind(before, record)
        if kind is None:
            return
        self.publish_threadsafe(
            self.make(
                kind,
                sandbox_id=record.id,
                template=record.template,
                state=record.state,
                owner=record.owner,
                detail={"error": record.error} if kind == "error" and record.error else {},
            )
        )

    def build_progress(self, template: str, owner: str | None, detail: dict[str, Any]) -> None:
        self.publish_threadsafe(self.make("build", template=template, owner=owner, detail=detail))

    async def follow(
        self, principal: access.Principal, *, keepalive: float = 15.0
    ) -> AsyncIterator[Event | None]:
        """Events visible to ``principal`` as they come; None every ``keepalive`` seconds of
        quiet (so a stream can send a comment and notice a gone client)."""
        subscription = self.subscribe(principal)
        try:
            while True:
                yield await subscription.next(keepalive)
        finally:
            subscription.close()
