"""The transition guard: every action against every state, as ``require_state`` answers it."""

from __future__ import annotations

import pytest

from corral.service.errors import StateConflict
from corral.service.model import (
    TRANSITIONS,
    Action,
    Operation,
    SandboxState,
    refuse_secrets,
    require_state,
)
from corral.storage import SandboxRecord

HINTS = {
    SandboxState.KILLED: "it is gone, create a new sandbox",
    SandboxState.STOPPED: "it is gone, create a new sandbox",
    SandboxState.ERROR: "(it died); kill it and create a new one",
    SandboxState.PARKED: "wake it first",
}


def record(state: SandboxState, operation: Operation | None = None) -> SandboxRecord:
    return SandboxRecord(
        id="sb-000000000001",
        state=state,
        template="base",
        cpu=1,
        memory_mib=256,
        disk_mib=512,
        operation=operation,
        error="it died" if state == SandboxState.ERROR else None,
    )


@pytest.mark.parametrize("action", list(Action))
@pytest.mark.parametrize("state", list(SandboxState))
def test_every_action_in_every_state(action: Action, state: SandboxState) -> None:
    allowed = TRANSITIONS[action]
    if state in allowed:
        require_state(record(state), action)
        return
    with pytest.raises(StateConflict) as caught:
        require_state(record(state), action)
    message = caught.value.message
    assert message.startswith(f"cannot {action} sandbox sb-000000000001 in state {state}")
    assert HINTS.get(state, "") in message


@pytest.mark.parametrize("action", list(Action))
def test_no_action_starts_while_another_is_in_flight(action: Action) -> None:
    state = TRANSITIONS[action][0]
    with pytest.raises(StateConflict, match="it is busy parking; try again when that has finished"):
        require_state(record(state, Operation.PARKING), action)


def test_states_and_operations_are_their_stored_strings() -> None:
    assert SandboxState.RUNNING == "running" and Operation.WAKING == "waking"
    assert record(SandboxState.PARKED).state == "parked"


def test_memory_with_secrets_does_not_leave_the_sandbox() -> None:
    bearing = record(SandboxState.RUNNING)
    bearing.secret_keys = ["TOKEN"]
    with pytest.raises(StateConflict, match="holds secrets \\(TOKEN\\)") as caught:
        refuse_secrets(bearing, "fork")
    assert caught.value.code == "secret_bearing"
    refuse_secrets(record(SandboxState.RUNNING), "fork")
