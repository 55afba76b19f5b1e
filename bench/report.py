"""Run every bench with modest sizes and rewrite the "last run" part of bench/README.md.

    .venv/bin/python bench/report.py [--quick] [--only NAME ...] [--no-write]
    .venv/bin/python bench/report.py --only NAME --args "ARGS" --section KEY [--timeout S]

Each bench runs as its own process, one after the other; its printed tables go into the README
as they are, with the goal lines of all benches gathered at the top, the date, the commit, the
host and its load average (the machine may be shared: a high load weighs on every figure, and on
raw and corral alike since each bench takes its baselines in the same run). ``--quick`` uses tiny
sizes (to check that the benches work, not to quote). A bench that fails is reported as failed
with the end of its error output; the others still run.

The second form runs one bench with other sizes (e.g. ``--only density --args "--count 300"``)
and writes its figures into a section of their own, between ``<!-- KEY:begin -->`` and
``<!-- KEY:end -->`` (added above the last run the first time), leaving the last run alone.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
README = BENCH / "README.md"
BEGIN, END = "<!-- last-run:begin -->", "<!-- last-run:end -->"

# name -> (arguments of the default run, arguments of --quick, timeout in s)
BENCHES: dict[str, tuple[list[str], list[str], int]] = {
    "sandbox_latency": (["--runs", "10"], ["--runs", "2"], 900),
    "template_start": (["--runs", "10"], ["--runs", "2"], 1200),
    "lifecycle": (["--runs", "3"], ["--runs", "1"], 1500),
    "cli": (["--runs", "10"], ["--runs", "2"], 900),
    "exec_breakdown": (["--runs", "30"], ["--runs", "3"], 900),
    "broker": (
        [],
        [
            *("--requests", "200", "--connections", "20"),
            *("--sandbox-requests", "100", "--sandbox-connections", "8"),
        ],
        900,
    ),
    "density": (
        ["--count", "50", "--parked", "50", "--idle-window", "10"],
        ["--count", "4", "--parked", "3", "--idle-window", "3"],
        1800,
    ),
    "density_steady": (
        ["--count", "300"],
        ["--count", "3", "--sample", "3", "--alone-runs", "2", "--idle-window", "3"],
        1800,
    ),
}


def host_line() -> str:
    cores = os.cpu_count()
    with open("/proc/meminfo") as meminfo:
        total = int(meminfo.readline().split()[1]) // (1024 * 1024)
    try:
        runsc = subprocess.run(["runsc", "--version"], capture_output=True, text=True).stdout
        runsc_version = runsc.splitlines()[0] if runsc else "runsc (version unknown)"
    except OSError:
        runsc_version = "runsc not found"
    return (
        f"{cores} cores, {total} GiB, Linux {platform.release()}, {runsc_version}, "
        f"Python {platform.python_version()}"
    )


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(BENCH), "log", "-1", "--format=%h %s"], capture_output=True, text=True
    )
    return out.stdout.strip() or "(unknown)"


def run_bench(name: str, args: list[str], timeout: int) -> tuple[str, str]:
    """(the section of the README for one bench, its goal lines)."""
    argv = [sys.executable, str(BENCH / f"{name}.py"), *args]
    shown = " ".join(["bench/" + name + ".py", *args])
    print(f"running {shown} ...", file=sys.stderr, flush=True)
    load_before = load()
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        output, status = done.stdout, f"exit {done.returncode}"
        failed = done.returncode != 0
        error = done.stderr
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        error = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        status, failed = f"timed out after {timeout} s", True
    took = time.monotonic() - started
    head = (
        f"### {name}\n\n`{shown}` — {took:.0f} s, load average {load_before} before and "
        f"{load()} after"
    )
    body = f"```\n{output.rstrip()}\n```"
    if failed:
        tail = "\n".join(error.rstrip().splitlines()[-15:])
        body += f"\n\nFAILED ({status}); the end of its error output:\n\n```\n{tail}\n```"
        print(f"  {name} FAILED ({status})", file=sys.stderr, flush=True)
    goals = [f"{name}: {line[5:]}" for line in output.splitlines() if line.startswith("goal ")]
    if failed:
        goals.append(f"{name}: FAILED ({status}), see below")
    return f"{head}\n\n{body}\n", "\n".join(goals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check, don't quote")
    parser.add_argument("--only", nargs="*", choices=list(BENCHES), help="run only these")
    parser.add_argument("--no-write", action="store_true", help="print, leave README.md alone")
    parser.add_argument("--args", help="the bench's arguments instead of its defaults (one bench)")
    parser.add_argument("--section", help="write into the README section KEY, not the last run")
    parser.add_argument("--timeout", type=int, help="seconds, instead of the bench's default")
    args = parser.parse_args()
    names = args.only or list(BENCHES)
    if (args.args is not None or args.section) and len(names) != 1:
        parser.error("--args and --section take exactly one bench (--only NAME)")
    if args.section and not re.fullmatch(r"[a-z0-9-]+", args.section):
        parser.error("--section: lowercase letters, digits and dashes")
    started = datetime.now(UTC)
    load_at_start = load()
    sections, goals = [], []
    for name in names:
        default, quick, timeout = BENCHES[name]
        chosen = quick if args.quick else default
        if args.args is not None:
            chosen = args.args.split()
        section, goal_lines = run_bench(name, chosen, args.timeout or timeout)
        sections.append(section)
        if goal_lines:
            goals.append(goal_lines)
    minutes = (datetime.now(UTC) - started).total_seconds() / 60
    if args.section:
        write_section(args.section, started, load_at_start, minutes, sections[0], args.no_write)
        return
    sizes = (
        "QUICK sizes (a check that the benches work; not figures to quote)"
        if args.quick
        else ("the default modest sizes")
    )
    text = "\n".join(
        [
            BEGIN,
            f"## Last run: {started:%Y-%m-%d %H:%M} UTC\n",
            f"- commit: {commit()}",
            f"- host: {host_line()}",
            f"- load average (1, 5, 15 min) at the start: {load_at_start}, at the end: {load()};"
            f" the whole report took {minutes:.1f} min, with {sizes}",
            f"- regenerate with `.venv/bin/python bench/report.py` (benches: {', '.join(names)})\n",
            "### Goals of issue 14, as measured in this run\n",
            "```",
            "\n".join(goals) or "(none printed)",
            "```\n",
            *sections,
            END,
        ]
    )
    if args.no_write:
        print(text)
        return
    current = README.read_text() if README.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN not in current or END not in current:
        current = current.rstrip() + f"\n\n{BEGIN}\n{END}\n"
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.DOTALL)
    README.write_text(pattern.sub(lambda _m: text, current, count=1))
    print(f"wrote {README}", file=sys.stderr)


def write_section(
    key: str, started: datetime, load_at_start: str, minutes: float, body: str, dry: bool
) -> None:
    """One bench's run with sizes of its own, in the README section ``key``."""
    begin, end = f"<!-- {key}:begin -->", f"<!-- {key}:end -->"
    name = body.removeprefix("### ").split("\n", 1)[0]
    body = body.replace(f"### {name}", f"## {name} ({key})", 1)
    text = "\n".join(
        [
            begin,
            body.rstrip() + "\n",
            f"Run at {started:%Y-%m-%d %H:%M} UTC for {minutes:.1f} min; commit {commit()}; host"
            f" {host_line()}; load average at the start {load_at_start}, at the end {load()}.",
            end,
        ]
    )
    if dry:
        print(text)
        return
    current = README.read_text()
    if begin in current and end in current:
        pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.DOTALL)
        current = pattern.sub(lambda _m: text, current, count=1)
    elif BEGIN in current:
        current = current.replace(BEGIN, f"{text}\n\n{BEGIN}", 1)
    else:
        current = current.rstrip() + f"\n\n{text}\n"
    README.write_text(current)
    print(f"wrote the {key} section of {README}", file=sys.stderr)


if __name__ == "__main__":
    main()
