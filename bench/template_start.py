"""Create → first output from a cold template built here, beside raw `runsc run` in the same run.

    .venv/bin/python bench/template_start.py [--runs 30]

Rows (p50/p99 over the runs, ratio to raw `runsc run` of `echo hi` on the base rootfs):
- cold template: a template built by this bench (`base` + one RUN layer, served as a read-only
  overlayfs view of its layers), from the create call until `echo hi`'s output arrives;
- prebuilt base: the same for the debootstrapped `base` (its rootfs used in place);
- the build itself is timed once (not a latency row).
Warm templates and ready pools get their rows when they exist (issue 3, parts 5 and 8).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import Figures, RawRunsc, private_daemon, report, timed_inner

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
                "cold template (built, 2 layers): create → first output",
                timed_inner(lambda: first_output("bench-cold"), args.runs),
            )
            base = Figures(
                "prebuilt base: create → first output",
                timed_inner(lambda: first_output("base"), args.runs),
            )
        report([(cold, raw_run), (base, raw_run)])
        print(f"\nbuilding bench-cold (base + RUN echo): {build_s:.2f} s")
    finally:
        raw.close()


if __name__ == "__main__":
    main()
