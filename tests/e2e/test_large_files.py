"""A 1 GiB file moves in and out of a sandbox without being held in memory on either side."""

from __future__ import annotations

import hashlib
import os
import resource
from pathlib import Path

from corral import Sandbox
from tests.e2e.conftest import Daemon

GIB = 1 << 30
BLOCK = os.urandom(1 << 20)


def peak_rss_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmHWM")


def test_one_gib_round_trip_streams(daemon: Daemon, tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    digest = hashlib.sha256()
    with open(source, "wb") as handle:
        for i in range(GIB // len(BLOCK)):
            block = i.to_bytes(8, "big") + BLOCK[8:]
            digest.update(block)
            handle.write(block)
    expected = digest.hexdigest()
    own_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024

    with Sandbox.create(url=daemon.url, api_key=daemon.key, disk_mib=2048) as sbx:
        sbx.files.upload(source, "/data/big.bin")
        inside = sbx.exec(["sha256sum", "/data/big.bin"], timeout=120)
        assert inside.stdout.split()[0] == expected
        back = tmp_path / "back.bin"
        sbx.files.download("/data/big.bin", back)
    check = hashlib.sha256()
    with open(back, "rb") as handle:
        while chunk := handle.read(1 << 20):
            check.update(chunk)
    assert check.hexdigest() == expected

    own_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024 - own_before
    assert own_growth < 256, f"the SDK side grew by {own_growth} MiB"
    assert peak_rss_mib(daemon.process.pid) < 400, "the daemon held the file in memory"
