"""Create → first output from a cold template built here, beside raw `runsc run` in the same run.

    .venv/bin/python bench/template_start.py [--runs 30]

Rows (p50/p99 over the runs), from the create call until `echo hi`'s output arrives:
- cold template: a template built by this bench (`base` + one RUN layer, served as a read-only
  overlayfs view of its layers), beside raw `runsc run` of `echo hi` on the base rootfs;
- prebuilt base: the same for the debootstrapped `base` (its rootfs used in place);
- warm template: built with a warmup (a Python process left running) and `--warm`, so every
  sandbox is restored from its memory image; beside raw `runsc restore` of an idle Python
  container's checkpoint taken as corral takes a warm template's (``--compression=none``), and,
  printed beside, of one taken with runsc's default compression (restore alone, no exec: raw
  runsc has no agent to answer);
- ready pool: a template with a pool; each run claims a ready sandbox (the bench waits, untimed,
  for the pool to refill between runs); beside raw `runsc run`.
The build itself is timed once (not a latency row).

Goals (issue 14): cold at most 1.3x raw `runsc run`, warm at most 1.3x raw `runsc restore`, ready
pool at most the in-sandbox spawn floor (``floor.py``, measured in a pooled sandbox) + 5 ms.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import Figures, RawRunsc, private_daemon, report, timed_inner
from _measure import goal_line, ratio_goal_line
from floor import echo_floor, echo_note, spawn_floor

from corral import Client, Sandbox, Template


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    raw = RawRunsc()
    try:
        raw_run = Figures(
            "raw runsc run: echo hi → first output",
            timed_inner(lambda: raw.run_first_output(["echo", "hi"], b"hi\n"), args.runs),
        )
        idle = raw.start_detached(["python3", "-c", "import time; time.sleep(100000)"])
        time.sleep(0.5)
        image, flat = raw.root / "idle-image", raw.root / "idle-image-flat"
        raw.checkpoint(idle, image, leave_running=True)
        raw.checkpoint(idle, flat, compress=False)
        raw.delete(idle)

        def raw_restore(of: Path) -> float:
            cid, ms = raw.restore(of, idle)
            raw.delete(cid)
            return ms

        raw_restore_default = Figures(
            "raw runsc restore (idle python)", timed_inner(lambda: raw_restore(image), args.runs)
        )
        raw_restore_figures = Figures(
            "raw runsc restore, uncompressed image",
            timed_inner(lambda: raw_restore(flat), args.runs),
        )
        with private_daemon() as daemon:
            kw = {"url": daemon.url, "api_key": daemon.key}
            with Client(**kw) as client:
                started = time.perf_counter()
                spec = Template().from_image("base").run_cmd("echo built > /built")
                Template.build(spec, "bench-cold", client=client)
                build_s = time.perf_counter() - started

            def first_output(template: str) -> float:
                arrived: list[float] = []
                started = time.perf_counter()
                sbx = Sandbox.create(template=template, **kw)
                try:
                    result = sbx.exec(
                        ["echo", "hi"], on_stdout=lambda _t: arrived.append(time.perf_counter())
                    )
                    assert result.stdout == "hi\n" and arrived
                finally:
                    sbx.kill()
                return (arrived[0] - started) * 1000

            cold = Figures(
                "cold template (2 layers): create → output",
                timed_inner(lambda: first_output("bench-cold"), args.runs),
            )
            base = Figures(
                "prebuilt base: create → first output",
                timed_inner(lambda: first_output("base"), args.runs),
            )
            with Client(**kw) as client:
                warmup = "python3 -c 'import time; time.sleep(100000)' >/dev/null 2>&1 & sleep 1"
                Template.build(
                    Template().from_image("base"),
                    "bench-warm",
                    client=client,
                    warmup=warmup,
                    warm=True,
                    memory_mib=256,
                )
                Template.build(Template().from_image("base"), "bench-pool", client=client, pool=2)

                def pool_first_output() -> float:
                    deadline = time.monotonic() + 60
                    while time.monotonic() < deadline:
                        if client.get_template("bench-pool").pool_ready >= 1:
                            break
                        time.sleep(0.05)
                    return first_output("bench-pool")

                warm = Figures(
                    "warm template: create → first output",
                    timed_inner(lambda: first_output("bench-warm"), args.runs),
                )
                pool = Figures(
                    "ready pool: create → first output",
                    timed_inner(pool_first_output, args.runs),
                )
                with Sandbox.create(template="bench-pool", **kw) as sbx:
                    floor = spawn_floor(sbx, max(50, args.runs * 5))
                    echo = echo_floor(sbx, max(50, args.runs * 5))
        report([(cold, raw_run), (base, raw_run), (warm, raw_restore_figures), (pool, raw_run)])
        d = raw_restore_default
        print(f"{d.name:44} {d.p50:9.2f} {d.p99:9.2f} {'(other)':>10}")
        print(f"{floor.name:44} {floor.p50:9.2f} {floor.p99:9.2f} {'(floor)':>10}")
        print(f"{echo.name:44} {echo.p50:9.2f} {echo.p99:9.2f} {'(floor)':>10}")
        print()
        print(ratio_goal_line("cold template", cold.p50, raw_run.p50, 1.3, "raw runsc run"))
        print(ratio_goal_line("prebuilt base", base.p50, raw_run.p50, 1.3, "raw runsc run"))
        print(
            ratio_goal_line(
                "warm template", warm.p50, raw_restore_figures.p50, 1.3, "restore, uncompressed"
            )
        )
        print(
            f"  (corral keeps a warm template's image uncompressed; against raw restore of "
            f"runsc's default, compressed, image: {warm.p50 / raw_restore_default.p50:.2f}x)"
        )
        print(goal_line("ready pool", pool.p50, floor.p50 + 5, "ms", "spawn floor + 5 ms"))
        print(echo_note(pool.p50, floor, echo))
        print(f"\nbuilding bench-cold (base + RUN echo): {build_s:.2f} s")
    finally:
        raw.close()


if __name__ == "__main__":
    main()
