"""The code interpreter: run_code round trips and create → first result, each beside the same
thing done with plain exec in the same run.

    .venv/bin/python bench/code_interpreter.py [--runs 30]

Builds a `code-interpreter` template in a private daemon first (timed once; minutes: pip).
Rows (p50/p99 ms over the runs):
- `run_code("x + 1")` in a running sandbox (state kept in its kernel), beside `exec("true")`,
  corral's plain process round trip, and beside `exec python3 -c ...`, what running the same
  snippet costs without an interpreter (a fresh Python each time, no state);
- a matplotlib plot's round trip (figure rendered to PNG in the kernel), beside `run_code("1")`;
- create → first `run_code` result on the warm template (its kernel restored, numpy/pandas/
  matplotlib loaded), beside create → first `exec` output on `base`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import Figures, private_daemon, report, timed, timed_inner

from corral import Client, Sandbox, Template

PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    with private_daemon() as daemon:
        kw = {"url": daemon.url, "api_key": daemon.key}
        with Client(**kw) as client:
            started = time.perf_counter()
            Template.build(Template().with_recipe("code-interpreter"), "bench-ci", client=client)
            build_s = time.perf_counter() - started
        with Sandbox.create(template="bench-ci", **kw) as sbx:
            sbx.run_code("x = 41")
            exec_true = Figures("exec true", timed(lambda: sbx.exec("true"), args.runs))
            exec_python = Figures(
                "exec python3 -c 'x = 41; print(x + 1)'",
                timed(lambda: sbx.exec(["python3", "-c", "x = 41; print(x + 1)"]), args.runs),
            )
            one = Figures("run_code('1')", timed(lambda: sbx.run_code("1"), args.runs))
            plus = Figures(
                "run_code('x + 1') (state kept)", timed(lambda: sbx.run_code("x + 1"), args.runs)
            )
            plot = Figures(
                "run_code(matplotlib plot → PNG)", timed(lambda: sbx.run_code(PLOT), args.runs)
            )

        def first_result(template: str, code: bool) -> float:
            started = time.perf_counter()
            box = Sandbox.create(template=template, **kw)
            try:
                if code:
                    assert box.run_code("6 * 7").text == "42"
                else:
                    assert box.exec(["echo", "42"]).stdout == "42\n"
                return (time.perf_counter() - started) * 1000
            finally:
                box.kill()

        runs = max(5, args.runs // 3)
        cold_exec = Figures(
            "create → first exec output (base)",
            timed_inner(lambda: first_result("base", False), runs),
        )
        warm_code = Figures(
            "create → first run_code result (warm ci)",
            timed_inner(lambda: first_result("bench-ci", True), runs),
        )
    print(f"template build with the code-interpreter recipe: {build_s:.1f} s")
    report(
        [
            (one, exec_true),
            (plus, exec_true),
            (exec_python, exec_true),
            (plus, exec_python),
            (plot, one),
            (warm_code, cold_exec),
        ]
    )


if __name__ == "__main__":
    main()
