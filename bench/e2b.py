"""The E2B front against corral's own SDK, on one private daemon, in one run.

    .venv/bin/python bench/e2b.py [--runs 15]

Measured through the official `e2b` SDK (pointed at the daemon by the settings `corral e2b env`
prints) and, as the baseline, through corral's SDK doing the same:

    create -> first output    Sandbox.create, then a command printing one line, its output
                              read (e2b: commands.run over envd's Connect RPC; corral: exec)
    exec round trip           `true` in a running sandbox
    file write + read         4 KiB written and read back
    run_code round trip       `1 + 1` in a code-interpreter sandbox (e2b-code-interpreter's
                              run_code vs corral's); the template is built first (its recipe's
                              pip installs: a minute or more), unless --no-code-interpreter

The two paths are taken in turn in every round, so load from elsewhere weighs on both alike.
Sandboxes are killed after each create; the steady-state measures use one sandbox per SDK.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# This file is named e2b.py and Python puts its folder first on the path: without that entry,
# `import e2b` finds the official SDK, not this script.
HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(HERE)]
import e2b  # noqa: E402

sys.path.insert(0, HERE)

from _harness import Figures, private_daemon, report, timed  # noqa: E402

import corral  # noqa: E402

BLOCK = os.urandom(4096)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-code-interpreter", action="store_true", help="skip run_code")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with private_daemon() as daemon:
        os.environ.update(
            E2B_API_URL=daemon.url, E2B_SANDBOX_URL=daemon.url, E2B_API_KEY=daemon.key
        )
        client = corral.Client(daemon.url, daemon.key)

        def corral_first_output() -> None:
            with client.create_sandbox("base") as sbx:
                assert sbx.exec(["echo", "hi"]).stdout == "hi\n"

        def e2b_first_output() -> None:
            sbx = e2b.Sandbox.create("base", timeout=120)
            try:
                assert sbx.commands.run("echo hi").stdout == "hi\n"
            finally:
                sbx.kill()

        corral_create: list[float] = []
        e2b_create: list[float] = []
        for i in range(args.runs + 1):  # in turn; the first round warms up
            got_corral = timed(corral_first_output, 1, warmup=0)
            got_e2b = timed(e2b_first_output, 1, warmup=0)
            if i:
                corral_create += got_corral
                e2b_create += got_e2b
        base_create = Figures("corral SDK: create -> first output", corral_create)
        rows = [(Figures("e2b SDK: create -> first output", e2b_create), base_create)]

        with client.create_sandbox("base") as mine:
            theirs = e2b.Sandbox.create("base", timeout=600)
            try:
                pairs = {
                    "exec round trip": (
                        lambda: mine.exec(["true"]),
                        lambda: theirs.commands.run("true"),
                    ),
                    "file write + read (4 KiB)": (
                        lambda: mine.files.write("/tmp/b", BLOCK) and mine.files.read("/tmp/b"),
                        lambda: (
                            theirs.files.write("/tmp/b", BLOCK)
                            and theirs.files.read("/tmp/b", format="bytes")
                        ),
                    ),
                }
                for name, (ours, e2bs) in pairs.items():
                    mine_ms: list[float] = []
                    theirs_ms: list[float] = []
                    for i in range(args.runs + 2):
                        a, b = timed(ours, 1, warmup=0), timed(e2bs, 1, warmup=0)
                        if i >= 2:
                            mine_ms += a
                            theirs_ms += b
                    base = Figures(f"corral SDK: {name}", mine_ms)
                    rows.append((Figures(f"e2b SDK: {name}", theirs_ms), base))
            finally:
                theirs.kill()
        if not args.no_code_interpreter:
            rows += run_code_rows(client, args.runs)
    load_after = os.getloadavg()[0]
    print(
        f"{args.runs} runs each, the two SDKs in turn; "
        f"load average {load_before:.2f} before, {load_after:.2f} after"
    )
    report(rows)


def run_code_rows(client: corral.Client, runs: int) -> list[tuple[Figures, Figures | None]]:
    """run_code round trips in a `code-interpreter` template, built here from corral's recipe."""
    from e2b_code_interpreter import Sandbox as CodeSandbox

    from corral.sdk.templates import Template

    Template.build(
        Template().with_recipe("code-interpreter"),
        "code-interpreter",
        client=client,
        step_timeout=1200,
    )
    with client.create_sandbox("code-interpreter") as mine:
        theirs = CodeSandbox.create("code-interpreter", timeout=600)
        try:
            mine_ms, theirs_ms = [], []
            for i in range(runs + 2):
                a = timed(lambda: mine.run_code("1 + 1"), 1, warmup=0)
                b = timed(lambda: theirs.run_code("1 + 1"), 1, warmup=0)
                if i >= 2:
                    mine_ms += a
                    theirs_ms += b
        finally:
            theirs.kill()
    base = Figures("corral SDK: run_code round trip", mine_ms)
    return [(Figures("e2b-code-interpreter: run_code round trip", theirs_ms), base)]


if __name__ == "__main__":
    main()
