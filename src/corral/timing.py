"""Phase timing: where the time of one call goes, step by step (``Server-Timing``).

A caller that wants the breakdown of a call opens a ``Phases`` collector around it
(``collecting()``); the code on the call's path marks its steps with ``phase("name")``, a
context manager that adds the step's wall time to the collector of the current context, if any.
Without a collector a ``phase`` costs one context-variable read, so the marks stay in the code.
The collector is carried by ``contextvars``: tasks the call starts (``asyncio.gather``, fork's
children) and threads it hands work to (``asyncio.to_thread``) add to the same one, so the
phases of concurrent steps add up to more than the call's wall time. Background work the call
leaves behind (a park's teardown) adds to it too, after the answer: it is not on the call's path
and the answer does not show it.

Phases nest: a phase counts its *own* time, its wall time less that of the phases marked inside
it (in its context, its tasks' and its threads'), so a coarse mark around a step (``generation``
around a runtime's boot) shows what no finer mark covers, and the phases of a sequential call add
up to at most its wall time.

Names are short, lower case, words separated by spaces (``runsc restore``, ``db commit``); the
API renders them as ``Server-Timing`` metrics (spaces as ``-``) with ``dur`` in ms and ``desc``
holding the count when a step ran more than once.

A foundation: imports nothing of the daemon's layers; every layer may mark its steps.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

__all__ = ["Phases", "beside", "collecting", "current_phases", "phase", "server_timing"]


class Phases:
    """Wall time (ms) and count per phase name of one call, in the order first seen.

    Not locked: additions are single dict updates, made from the event loop and from worker
    threads; CPython keeps each one whole, and a lost addition would only blur a figure.
    """

    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = {}

    def add(self, name: str, ms: float) -> None:
        entry = self.totals.get(name)
        if entry is None:
            self.totals[name] = [ms, 1.0]
        else:
            entry[0] += ms
            entry[1] += 1

    def items(self) -> list[tuple[str, float, int]]:
        """``(name, total ms, count)`` per phase."""
        return [(name, ms, int(count)) for name, (ms, count) in self.totals.items()]


_current: contextvars.ContextVar[Phases | None] = contextvars.ContextVar(
    "corral_phases", default=None
)
# The time spent in phases inside the innermost open phase (ms), subtracted from its own.
_inner: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "corral_phase_inner", default=None
)


def current_phases() -> Phases | None:
    """The collector of the current context (None: nobody asked), for steps timed by hooks."""
    return _current.get()


@contextlib.contextmanager
def collecting() -> Iterator[Phases]:
    """Collect the phases marked in this context (and the tasks and threads it starts)."""
    phases = Phases()
    token = _current.set(phases)
    inner = _inner.set(None)
    try:
        yield phases
    finally:
        _inner.reset(inner)
        _current.reset(token)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Add the block's own time (its wall time less its inner phases') to the current collector
    as ``name`` (if one is open)."""
    phases = _current.get()
    if phases is None:
        yield
        return
    outer = _inner.get()
    inner = [0.0]
    token = _inner.set(inner)
    started = time.perf_counter()
    try:
        yield
    finally:
        elapsed = (time.perf_counter() - started) * 1000
        _inner.reset(token)
        phases.add(name, max(0.0, elapsed - inner[0]))
        if outer is not None:
            outer[0] += elapsed


@contextlib.contextmanager
def beside() -> Iterator[None]:
    """Phases marked in the block run beside the enclosing phase (a task it started that
    overlaps it), not inside it: their time is not taken off the enclosing phase's own."""
    token = _inner.set(None)
    try:
        yield
    finally:
        _inner.reset(token)


def server_timing(phases: Phases) -> str:
    """The ``Server-Timing`` header value of ``phases``: ``name;dur=MS[;desc="xN"]``, ..."""
    parts = []
    for name, ms, count in phases.items():
        metric = "-".join(name.split()) or "phase"
        part = f"{metric};dur={ms:.2f}"
        if count > 1:
            part += f';desc="x{count}"'
        parts.append(part)
    return ", ".join(parts)
