"""The agent's OOM killer, one look at a time, with the sandbox's memory faked and a real victim."""

from __future__ import annotations

import os
import subprocess

from corral.agent.oom import COOLDOWN, MAX_INTERVAL, MIB, OomKiller, ancestry


def test_kills_the_largest_once_per_cooldown_and_reports_it() -> None:
    victim = subprocess.Popen(["sleep", "60"])
    free = [1 * MIB]
    kills: list[tuple[list[int], int, str, int]] = []
    killer = OomKiller(
        lambda *kill: kills.append(kill),
        read_memory=lambda: (256 * MIB, free[0]),
        find_victim=lambda exclude: (victim.pid, 200 * MIB, "sleep"),
    )
    try:
        killer.check()
        assert victim.wait(5) == -9
        [(chain, resident, name, total)] = kills
        assert chain[:2] == [victim.pid, os.getpid()]
        assert (resident, name, total) == (200 * MIB, "sleep", 256 * MIB)
        killer.check()  # still short, but within the cooldown: no second victim yet
        assert killer.kills == 1 and killer.cooldown_until > 0
        free[0] = 200 * MIB  # memory came back: the cooldown ends
        assert killer.check() > 0
        assert killer.cooldown_until == 0.0
    finally:
        victim.kill()
        victim.wait()
    assert COOLDOWN > 0


def test_plenty_of_memory_kills_nothing_and_looks_rarely() -> None:
    killer = OomKiller(
        lambda *kill: None,
        read_memory=lambda: (8192 * MIB, 8000 * MIB),
        find_victim=lambda exclude: (os.getpid(), 1, "must-not-die"),
    )
    assert killer.check() == MAX_INTERVAL
    assert killer.kills == 0


def test_ancestry_walks_up_to_init() -> None:
    chain = ancestry(os.getpid())
    # The test runner's parent is init when it was started detached (nohup ... &): then the
    # chain is this process alone.
    expected = [os.getpid()] + ([os.getppid()] if os.getppid() > 1 else [])
    assert chain[: len(expected)] == expected
    assert 1 not in chain


def test_does_not_start_outside_a_sandbox() -> None:
    killer = OomKiller(lambda *kill: None)
    killer.start()  # not PID 1 here: it must not watch (and kill) the host's processes
    assert killer.kills == 0
