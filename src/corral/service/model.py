"""The sandbox model: its states, the operations in flight, the transition table, the one guard
every transition goes through, and the typed requests the service takes.

Nothing else defines a state. States and operations are ``StrEnum``s: a member *is* its string,
so the store keeps plain text and a record read back compares equal to the member.

The life of a sandbox (``TRANSITIONS``: which action may start from which state)::

    creating ──▶ running ⇄ parked          (park / wake)
                 running ──▶ killed        (kill; also from parked, error, creating)
                 any live ──▶ error        (its runtime died, or recovery failed)

An action in flight is written to the record's ``operation`` before it touches the runtime; while
one is set, no other action starts (``require_state`` says the sandbox is busy), so a daemon killed
mid-way finds at its next start what was interrupted (``lifecycle/reconcile.py``).
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from corral.service.errors import StateConflict
from corral.storage import SandboxRecord

__all__ = [
    "ACTIVE_STATES",
    "ENDED_STATES",
    "LIVE_STATES",
    "PRUNED_STATES",
    "TIMEOUT_ACTIONS",
    "TRANSITIONS",
    "Action",
    "CreateRequest",
    "ExecSpec",
    "Operation",
    "SandboxState",
    "new_sandbox_id",
    "refuse_secrets",
    "require_state",
]


class SandboxState(StrEnum):
    """Where a sandbox is in its life (the record's ``state``)."""

    CREATING = "creating"
    RUNNING = "running"
    PARKED = "parked"
    STOPPED = "stopped"
    KILLED = "killed"
    ERROR = "error"


class Operation(StrEnum):
    """An action in flight on a sandbox (the record's ``operation``), written before it starts."""

    CREATING = "creating"
    RESTORING = "restoring"  # created from a snapshot
    FORKING = "forking"  # on the source while it is checkpointed, and on each child
    PARKING = "parking"
    WAKING = "waking"
    SNAPSHOTTING = "snapshotting"
    KILLING = "killing"


# Holding resources (cpu and memory reserved, or an image on disk): what admission counts.
LIVE_STATES = frozenset({SandboxState.CREATING, SandboxState.RUNNING, SandboxState.PARKED})
# Reserving cpu and memory (a parked sandbox holds only disk): what capacity and quotas count.
ACTIVE_STATES = frozenset({SandboxState.CREATING, SandboxState.RUNNING})
# Not listed by default; their records (and failed ones') are pruned after the retention.
ENDED_STATES = frozenset({SandboxState.KILLED, SandboxState.STOPPED})
PRUNED_STATES = frozenset({*ENDED_STATES, SandboxState.ERROR})
TIMEOUT_ACTIONS = ("kill", "park")
MIN_MEMORY_MIB = 64
MIN_DISK_MIB = 32
MIN_CPU = 0.05

_ID_ALPHABET = string.ascii_lowercase + string.digits
_ID_LENGTH = 12


class Action(StrEnum):
    """What a caller asks of a sandbox, as ``require_state`` names it in its refusal."""

    PARK = "park"
    WAKE = "wake"
    FORK = "fork"
    SNAPSHOT = "snapshot"
    EXPORT = "export"
    SET_NETWORK = "change the network of"
    SET_TIMEOUT = "set the timeout of"


# The states each action may start from (kill needs no guard: it ends any sandbox).
TRANSITIONS: Mapping[Action, tuple[SandboxState, ...]] = {
    Action.PARK: (SandboxState.RUNNING,),
    Action.WAKE: (SandboxState.PARKED,),
    Action.FORK: (SandboxState.RUNNING,),
    Action.SNAPSHOT: (SandboxState.RUNNING,),
    Action.EXPORT: (SandboxState.PARKED,),
    Action.SET_NETWORK: (SandboxState.RUNNING, SandboxState.PARKED),
    Action.SET_TIMEOUT: (SandboxState.RUNNING, SandboxState.PARKED),
}


def new_sandbox_id() -> str:
    """A fixed-width id (runsc matches container ids by prefix, so widths must not vary)."""
    return "sb-" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(_ID_LENGTH))


def require_state(record: SandboxRecord, action: str, *allowed: str) -> None:
    """The one guard of every transition: raise StateConflict unless the state allows ``action``
    (``allowed`` defaults to the transition table's row for ``action``) and no other operation is
    in flight."""
    if not allowed and action in TRANSITIONS:
        allowed = TRANSITIONS[Action(action)]
    if record.state not in allowed or (record.operation and record.state != "creating"):
        hint = ""
        if record.operation and record.state in allowed:
            raise StateConflict(
                f"cannot {action} sandbox {record.id}: it is busy {record.operation}; "
                "try again when that has finished"
            )
        if record.state in ENDED_STATES:
            hint = "; it is gone, create a new sandbox"
        elif record.state == SandboxState.ERROR:
            hint = f" ({record.error}); kill it and create a new one"
        elif record.state == SandboxState.PARKED:
            hint = "; wake it first"
        raise StateConflict(f"cannot {action} sandbox {record.id} in state {record.state}{hint}")


@dataclass
class CreateRequest:
    """What a caller asks of a new sandbox (the API body, already parsed; validated by
    ``sandboxes/admission.py``)."""

    template: str = "base"
    cpu: float | None = None
    memory_mib: int | None = None
    disk_mib: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    ttl_seconds: int | None = None
    secret_env: dict[str, str] = field(default_factory=dict)
    on_timeout: str = "kill"
    auto_park_idle: int | None = None
    auto_wake: bool = False
    # Egress (docs/network.md): a mode (None: the workspace's default) and rule texts.
    network: str | None = None
    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)
    # Brokered secrets (docs/secrets.md): their names, and files path -> (name, template).
    secrets: list[str] = field(default_factory=list)
    secret_files: dict[str, tuple[str, str | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class PtySize:
    """A terminal's size in character cells."""

    rows: int
    cols: int


@dataclass(frozen=True)
class ExecSpec:
    """A process to start in a sandbox: a caller's exec or terminal (through the API, E2B's
    envd or the console), or one the daemon starts itself (a template's start command, a
    warmup, a build step, a snapshot tool). ``to_wire`` is the agent's process API body.
    ``cmd`` (argv) or ``shell`` (a ``/bin/sh -c`` string); a terminal (``pty``) takes ``cmd``
    or neither (the login shell)."""

    cmd: list[str] | None = None
    shell: str | None = None
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    user: str | None = None
    stdin: bool | None = None  # keep stdin open for later input
    tag: str | None = None
    timeout: float | None = None
    restart: bool | None = None  # restarted by the agent whenever it exits
    pty: PtySize | None = None

    def to_wire(self) -> dict[str, object]:
        """The agent's JSON body: the fields that are set (the agent reads an absent field and
        a null one alike: its default)."""
        fields: dict[str, object] = {
            "cmd": self.cmd,
            "shell": self.shell,
            "env": dict(self.env) if self.env is not None else None,
            "cwd": self.cwd,
            "user": self.user,
            "stdin": self.stdin,
            "tag": self.tag,
            "timeout": self.timeout,
            "restart": self.restart,
            "pty": {"rows": self.pty.rows, "cols": self.pty.cols} if self.pty else None,
        }
        return {key: value for key, value in fields.items() if value is not None}


def refuse_secrets(record: SandboxRecord, action: str) -> None:
    """The guard of every action that copies a sandbox's memory (fork, memory snapshot,
    export): memory of a secret-bearing sandbox holds its secrets, which must not leave it."""
    if record.secret_keys:
        raise StateConflict(
            f"cannot {action} sandbox {record.id}: it holds secrets "
            f"({', '.join(record.secret_keys)}) in memory, and a {action} would copy them; "
            "create a new sandbox and give it its own secrets",
            code="secret_bearing",
        )
