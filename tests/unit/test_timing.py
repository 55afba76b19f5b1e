"""Phase timing (corral.timing): what a collector sees of the steps of one call, and nothing
when no caller opened one."""

from __future__ import annotations

import asyncio

import pytest

from corral import timing
from corral.timing import collecting, current_phases, phase, server_timing


async def test_phases_of_a_call_add_up_across_its_tasks_and_threads() -> None:
    def blocking_step() -> None:
        with phase("disk create"):
            pass

    async def child() -> None:
        with phase("runsc restore"):
            await asyncio.sleep(0)
        await asyncio.to_thread(blocking_step)

    with collecting() as phases:
        with phase("db commit"):
            pass
        await asyncio.gather(child(), child(), child())
    counts = {name: count for name, _ms, count in phases.items()}
    assert counts == {"db commit": 1, "runsc restore": 3, "disk create": 3}
    assert all(ms >= 0 for _name, ms, _count in phases.items())


async def test_a_step_outside_any_collector_is_not_recorded() -> None:
    with phase("runsc restore"):
        assert current_phases() is None
    with collecting() as phases:
        pass
    with phase("runsc restore"):
        pass
    assert phases.items() == []


def test_server_timing_header_names_each_step_with_its_count() -> None:
    with collecting() as phases:
        phases.add("runsc restore", 190.123)
        phases.add("db commit", 2.0)
        phases.add("db commit", 2.5)
    assert server_timing(phases) == ('runsc-restore;dur=190.12, db-commit;dur=4.50;desc="x2"')


def test_a_phase_counts_its_own_time_without_the_phases_inside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    with collecting() as phases, phase("boot"):
        clock[0] += 0.010
        with phase("runsc restore"):
            clock[0] += 0.200
        clock[0] += 0.005
    took = {name: round(ms, 6) for name, ms, _count in phases.items()}
    assert took == {"runsc restore": 200.0, "boot": 15.0}
