"""The Go agent's own unit tests (``src/corral/agent/go/*_test.go``), run with the toolchain that
builds it (scripts/build-agent's: standard library only, no module downloads, no cgo)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

from corral.agent import AGENT_DIR


def _go() -> str:
    found = os.environ.get("GO") or shutil.which("go")
    candidates = [found] if found else []
    candidates += sorted(glob.glob("/usr/lib/go-1.2[2-9]/bin/go"), reverse=True)
    candidates.append("/usr/lib/go/bin/go")
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise AssertionError("no Go toolchain: run scripts/setup (installs golang-go)")


def test_the_go_agents_unit_tests_pass() -> None:
    env = {
        **os.environ,
        "GOTOOLCHAIN": "local",
        "GOFLAGS": "-mod=mod",
        "GOPROXY": "off",
        "CGO_ENABLED": "0",
    }
    result = subprocess.run(
        [_go(), "test", "-tags", "nethttpomithttp2", "-count=1", "."],
        cwd=AGENT_DIR / "go",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
