"""The record reads of a pool claim with many sandboxes on the host (no daemon, a store of its own).

Before (as corral read them up to this change): every running/creating record, filtered in
Python for the pool's, then every live record for the quota check. After: the pool's rows only
(``pooled_in``, filtered in SQL); the live records are read only for a key with quotas.
Usage: ``bench/claim_reads.py [PARKED RUNNING]`` (default 2000 300).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from corral.service.model import LIVE_STATES, SandboxState
from corral.storage import Database, SandboxRecord


def main() -> None:
    parked, running = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (2000, 300)
    with tempfile.TemporaryDirectory(prefix="corral-claim-") as tmp:
        db = Database(Path(tmp) / "corral.db")
        for i in range(parked + running + 2):
            pooled = i >= parked + running
            db.sandboxes.add(
                SandboxRecord(
                    id=f"sb-{i:08d}",
                    state=SandboxState.PARKED if i < parked else SandboxState.RUNNING,
                    template="pooled" if pooled else "base",
                    cpu=1,
                    memory_mib=64,
                    disk_mib=512,
                    created_at=time.time(),
                    pooled=pooled,
                )
            )
        wanted = {SandboxState.RUNNING, SandboxState.CREATING}

        def before() -> None:
            pool = [r for r in db.sandboxes.list(states=wanted) if r.pooled]
            db.sandboxes.list(states=LIVE_STATES)
            assert len(pool) == 2

        def after() -> None:
            assert len(db.sandboxes.list(states=wanted, pooled_in="pooled")) == 2

        figures: dict[str, list[float]] = {"before": [], "after": []}
        runs: list[tuple[str, Callable[[], None]]] = [("before", before), ("after", after)]
        for _ in range(9):
            for name, run in runs:
                started = time.perf_counter()
                run()
                figures[name].append((time.perf_counter() - started) * 1000)
        b, a = statistics.median(figures["before"]), statistics.median(figures["after"])
        print(f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(
            f"{parked} parked + {running} running + 2 pooled: a claim's record reads p50 "
            f"before {b:.1f} ms, after {a:.2f} ms ({b / a:.1f}x)"
        )


if __name__ == "__main__":
    main()
