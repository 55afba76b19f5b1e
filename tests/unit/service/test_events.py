"""The event stream's meaning of a state change, its filter per key, and build progress."""

from __future__ import annotations

from pathlib import Path

from corral.service.access import Principal
from corral.service.builds.log import BuildHandle
from corral.service.events import EventBus, sandbox_event_kind
from corral.storage import SandboxRecord

ADMIN = Principal("k-admin", "admin", "admin")
ALICE = Principal("k-alice", "alice", "member")
BOB = Principal("k-bob", "bob", "member")


def record(state: str, parent: str | None = None, pooled: bool = False) -> SandboxRecord:
    return SandboxRecord(
        id="sb-1", state=state, template="base", cpu=1, memory_mib=256, disk_mib=512,
        parent_id=parent, owner="k-alice", pooled=pooled,
    )  # fmt: skip


def test_each_transition_is_named() -> None:
    assert sandbox_event_kind(None, record("creating")) == "created"
    assert sandbox_event_kind(record("creating"), record("running")) == "running"
    assert sandbox_event_kind(record("creating"), record("running", parent="sb-0")) == "forked"
    assert sandbox_event_kind(record("running"), record("parked")) == "parked"
    assert sandbox_event_kind(record("parked"), record("running")) == "woken"
    assert sandbox_event_kind(record("running"), record("killed")) == "killed"
    assert sandbox_event_kind(record("running"), record("error")) == "error"
    assert sandbox_event_kind(record("running"), record("running")) is None  # no change
    # Claimed from a ready pool: new to its owner.
    assert sandbox_event_kind(record("running", pooled=True), record("running")) == "created"


async def test_subscribers_see_what_their_key_may_see_and_build_progress(tmp_path: Path) -> None:
    bus = EventBus()
    streams = {p.name: bus.subscribe(p) for p in (ADMIN, ALICE, BOB)}
    bus.sandbox_changed(record("running"), record("parked"))
    handle = BuildHandle(
        "py",
        tmp_path / "py.ndjson",
        on_progress=lambda event: bus.build_progress("py", "k-bob", event),
    )
    await handle.emit({"type": "step", "index": 0, "text": "RUN true"})
    await handle.emit({"type": "output", "index": 0, "stream": "stdout", "data": "x\n"})
    await handle.emit({"type": "done", "template": "py"})
    seen = {
        name: [(e.kind, e.sandbox_id or e.template, e.detail.get("type")) for e in _drain(s)]
        for name, s in streams.items()
    }
    assert seen["admin"] == [
        ("parked", "sb-1", None),
        ("build", "py", "step"),
        ("build", "py", "done"),
    ]
    assert seen["alice"] == [("parked", "sb-1", None)]
    assert seen["bob"] == [("build", "py", "step"), ("build", "py", "done")]


def _drain(subscription):  # type: ignore[no-untyped-def]
    found = []
    while not subscription.queue.empty():
        found.append(subscription.queue.get_nowait())
    return found
