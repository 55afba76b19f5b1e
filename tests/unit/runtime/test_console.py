"""Trimming a sandbox's console log keeps its newest quarter once it is over half full."""

from __future__ import annotations

import os
from pathlib import Path

from corral.runtime.console import trim_console


def test_a_log_under_half_its_bound_is_left_alone(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    log.write_bytes(b"a" * 500)
    assert not trim_console(log, size_kib=1)
    assert log.read_bytes() == b"a" * 500


def test_a_full_log_keeps_its_newest_quarter_and_says_so(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    log.write_bytes(b"old" * 300 + b"N" * 256)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)  # a writer like runsc's, open across the trim
    try:
        assert trim_console(log, size_kib=1)
        os.write(fd, b"after\n")
    finally:
        os.close(fd)
    data = log.read_bytes()
    assert data.startswith(b"[corral: 900 older bytes of this console were dropped]\n")
    assert data.endswith(b"N" * 256 + b"after\n")  # appends go on at the new end, no hole


def test_a_missing_log_is_not_an_error(tmp_path: Path) -> None:
    assert not trim_console(tmp_path / "none.log", size_kib=1)
