"""Which host CPUs a sandbox's gVisor runs on (``Generations._pick_cpuset``): never fewer than
the ``sandbox_min_cpus`` setting (2 by default: with one, an idle sandbox answers late)."""

from __future__ import annotations

import os
from typing import cast

import pytest

from corral.runtime.cgroups import SandboxCgroups
from corral.runtime.generation import Generations
from corral.runtime.runsc import RunscRunner


def generations(min_cpus: int | None = None) -> Generations:
    runsc, cgroups = cast(RunscRunner, None), cast(SandboxCgroups, None)  # not used here
    if min_cpus is None:
        return Generations(runsc, cgroups, 1024)
    return Generations(runsc, cgroups, 1024, min_cpus=min_cpus)


@pytest.fixture
def four_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})


@pytest.mark.usefixtures("four_cpus")
def test_by_default_a_small_sandbox_gets_two_cpus_in_turn() -> None:
    gens = generations()
    assert [gens._pick_cpuset(cpu) for cpu in (0.5, 1, 1)] == ["0,1", "2,3", "0,1"]
    assert gens._pick_cpuset(3) == "2,3,0"
    assert gens._pick_cpuset(4) is None  # as many as the host has: no cpuset


@pytest.mark.usefixtures("four_cpus")
def test_min_cpus_one_pins_a_small_sandbox_to_one() -> None:
    gens = generations(min_cpus=1)
    assert [gens._pick_cpuset(cpu) for cpu in (0.5, 1, 2)] == ["0", "1", "2,3"]


def test_on_a_two_cpu_host_the_default_sets_no_cpuset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    assert generations()._pick_cpuset(1) is None
    assert generations(min_cpus=1)._pick_cpuset(1) == "0"
