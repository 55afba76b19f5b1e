"""Every guarded action of the service, on the fakes, from every state its row of ``TRANSITIONS``
does not allow and while another operation is in flight: refused with StateConflict, and the
sandbox, its runtime and its slot are as they were. (``test_model`` checks the guard itself;
this checks that each service action goes through it before it touches anything.)"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from corral.service.errors import StateConflict
from corral.service.model import TRANSITIONS, Action, Operation, SandboxState
from corral.service.workspace import Workspace
from tests.unit.service.fakes import Fakes

Call = Callable[[Workspace, str], Awaitable[Any]]


async def _export(ws: Workspace, sandbox_id: str) -> None:
    async for _ in ws.transfer.export_sandbox(sandbox_id):
        pass


async def _set_timeout(ws: Workspace, sandbox_id: str) -> None:
    ws.sandboxes.set_timeout(sandbox_id, 60)


CALLS: dict[Action, Call] = {
    Action.PARK: lambda ws, sid: ws.lifecycle.park(sid),
    Action.WAKE: lambda ws, sid: ws.lifecycle.wake(sid),
    Action.FORK: lambda ws, sid: ws.lifecycle.fork(sid, 1),
    Action.SNAPSHOT: lambda ws, sid: ws.snapshots.take(sid, "guarded"),
    Action.EXPORT: _export,
    Action.SET_NETWORK: lambda ws, sid: ws.sandboxes.set_network(sid, mode="airgapped"),
    Action.SET_TIMEOUT: _set_timeout,
}


def test_every_guarded_action_is_called_here() -> None:
    assert set(CALLS) == set(Action)


def _refused() -> list[tuple[Action, SandboxState]]:
    cases = []
    for action in Action:
        for state in SandboxState:
            if state in TRANSITIONS[action]:
                continue
            if action is Action.WAKE and state is SandboxState.RUNNING:
                continue  # waking a running sandbox answers it as it is (test_park_wake_fork)
            cases.append((action, state))
    return cases


def _snapshot_of(fakes: Fakes, sandbox_id: str) -> tuple[object, ...]:
    record = fakes.workspace.sandboxes.get(sandbox_id)
    runtime = fakes.runtime.sandboxes.get(sandbox_id)
    return (
        record.state,
        record.operation,
        record.slot_index,
        record.expires_at,
        runtime.status if runtime else None,
        runtime.restored_from if runtime else None,
        sorted(fakes.network.leased),
        [r.id for r in fakes.workspace.sandboxes.list()],
        fakes.workspace.db.snapshots.list(),
    )


@pytest.mark.parametrize(("action", "state"), _refused(), ids=lambda v: str(v.value))
async def test_an_action_from_a_state_it_may_not_start_in_changes_nothing(
    fakes: Fakes, action: Action, state: SandboxState
) -> None:
    record = await fakes.running()
    fakes.workspace.db.sandboxes.update(record.id, state=state)
    before = _snapshot_of(fakes, record.id)
    with pytest.raises(StateConflict, match=f"cannot {action.value} sandbox {record.id}"):
        await CALLS[action](fakes.workspace, record.id)
    assert _snapshot_of(fakes, record.id) == before


@pytest.mark.parametrize("action", list(Action), ids=lambda a: str(a.value))
async def test_no_action_starts_while_another_is_in_flight(fakes: Fakes, action: Action) -> None:
    record = await fakes.running()
    state = TRANSITIONS[action][0]
    fakes.workspace.db.sandboxes.update(record.id, state=state, operation=Operation.KILLING)
    before = _snapshot_of(fakes, record.id)
    with pytest.raises(StateConflict, match="busy killing"):
        await CALLS[action](fakes.workspace, record.id)
    assert _snapshot_of(fakes, record.id) == before
