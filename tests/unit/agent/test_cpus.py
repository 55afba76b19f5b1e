"""The CPU count the agent's processes see (``agent/cpus.py``), on the host: the affinity part
(the sysfs bind needs CAP_SYS_ADMIN inside a sandbox: ``tests/e2e/test_inside.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from corral.agent.cpus import cpu_list, present_cpus

ROOT = Path(__file__).resolve().parents[3]
# Narrows its own affinity as the agent does at start, then asks a child what it sees.
NARROW = """
import subprocess, sys
from corral.agent.cpus import present_cpus
kept = present_cpus({"CORRAL_AGENT_CPUS": sys.argv[1]}, bind_sysfs=False)
nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
print(kept, nproc, sep="|")
"""


def test_cpu_list_is_the_kernels_format() -> None:
    assert cpu_list([0]) == "0"
    assert cpu_list([0, 1, 2, 3]) == "0-3"
    assert cpu_list([3, 0, 2]) == "0,2-3"


def test_no_count_or_as_many_as_it_has_changes_nothing() -> None:
    have = len(os.sched_getaffinity(0))
    assert present_cpus({}, bind_sysfs=False) is None
    assert present_cpus({"CORRAL_AGENT_CPUS": "x"}, bind_sysfs=False) is None
    assert present_cpus({"CORRAL_AGENT_CPUS": str(have)}, bind_sysfs=False) is None
    assert len(os.sched_getaffinity(0)) == have


def test_children_see_the_narrowed_count() -> None:
    have = sorted(os.sched_getaffinity(0))
    want = max(1, len(have) - 1)
    out = subprocess.run(
        [sys.executable, "-c", NARROW, str(want)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    ).stdout.strip()
    if len(have) == 1:  # nothing to narrow on a one-CPU host
        assert out == "None|1"
    else:
        assert out == f"{have[:want]}|{want}"
