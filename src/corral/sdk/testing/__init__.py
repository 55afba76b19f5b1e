"""`FakeDaemon`: an in-memory stand-in for the corral daemon, for tests of code that uses the SDK.

It speaks the v1 HTTP API (docs/api.md) through an `httpx.MockTransport`, so no socket is opened:

    fake = FakeDaemon()
    sbx = Sandbox.create(api_key=fake.api_key, transport=fake.transport)

Commands do not run anywhere; `FakeDaemon.run` answers them (`echo`, `cat`, `true`, `false`,
`exit N`, `sleep N`, `python3 -c`/`bash -c` echo their code) and tests may replace it. Faults
are injected by `break_streams_after` (a stream breaks once after N events, like a daemon
restart) and `fail_next` (the next request answers with an error).

One module per resource, as the daemon's API has them (each a mixin of routes over the shared
`FakeState`)::

    _state.py     the state, request dispatch, `Failure` (an API error answer)
    sandboxes.py  capacity, templates, create, list, kill, park/wake, fork
    snapshots.py  snapshots, export, import
    processes.py  exec, event streams, stdin, signals
    files.py      the files of each sandbox, in memory
    commands.py   `default_run`: the fake's command interpreter
"""

from __future__ import annotations

from corral.sdk.testing._state import Route
from corral.sdk.testing.commands import CommandOutcome, default_run
from corral.sdk.testing.files import FileRoutes
from corral.sdk.testing.processes import ProcessRoutes
from corral.sdk.testing.sandboxes import SandboxRoutes
from corral.sdk.testing.snapshots import SnapshotRoutes

__all__ = ["CommandOutcome", "FakeDaemon", "default_run"]


class FakeDaemon(SandboxRoutes, SnapshotRoutes, ProcessRoutes, FileRoutes):
    """An in-memory daemon. State is public so tests can arrange and assert on it."""

    def _routes(self) -> list[Route]:
        return [
            *self.sandboxes_routes(),
            *self.snapshots_routes(),
            *self.processes_routes(),
            *self.files_routes(),
        ]
