"""The lifecycle verbs through the real `corral` CLI: park, wake, fork, snapshot, export, import."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.conftest import Daemon


def ok(daemon: Daemon, *args: str) -> str:
    result = daemon.cli(*args)
    assert result.returncode == 0, (args, result.stderr.decode())
    return result.stdout.decode()


def test_cli_park_wake_fork_snapshot_export_import(daemon: Daemon, tmp_path: Path) -> None:
    sandbox_id = json.loads(ok(daemon, "new", "--memory", "256", "--json"))["id"]
    made = [sandbox_id]
    try:
        ok(daemon, "exec", sandbox_id, "--", "sh", "-c", "echo kept > /root/f")
        assert ok(daemon, "park", sandbox_id) == f"{sandbox_id} parked\n"
        assert json.loads(ok(daemon, "info", sandbox_id, "--json"))["state"] == "parked"
        exported = tmp_path / "sbx.corral"
        assert "exported" in ok(daemon, "export", sandbox_id, str(exported))
        assert ok(daemon, "wake", sandbox_id) == f"{sandbox_id} running\n"
        assert ok(daemon, "exec", sandbox_id, "--", "cat", "/root/f") == "kept\n"

        forked = json.loads(ok(daemon, "fork", sandbox_id, "--count", "2", "--json"))
        assert len(forked) == 2 and all(item["id"].startswith("sb-") for item in forked)
        made += [item["id"] for item in forked]
        assert ok(daemon, "exec", forked[1]["id"], "--", "cat", "/root/f") == "kept\n"

        assert ok(daemon, "snapshot", sandbox_id, "e2e-cli") == "e2e-cli\n"
        assert ok(daemon, "snapshot", sandbox_id, "e2e-cli-fs", "--fs-only") == "e2e-cli-fs\n"
        listed = json.loads(ok(daemon, "snapshot", "ls", "--json"))
        kinds = {item["name"]: item["kind"] for item in listed}
        assert (kinds["e2e-cli"], kinds["e2e-cli-fs"]) == ("memory", "fs")
        assert "e2e-cli" in ok(daemon, "snapshot", "ls")
        restored = ok(daemon, "new", "--snapshot", "e2e-cli").strip()
        made.append(restored)
        assert ok(daemon, "exec", restored, "--", "cat", "/root/f") == "kept\n"

        snapshot_file = tmp_path / "snap.corral"
        ok(daemon, "export", "snapshot:e2e-cli", str(snapshot_file))
        ok(daemon, "snapshot", "rm", "e2e-cli", "e2e-cli-fs")
        assert "e2e-cli" not in ok(daemon, "snapshot", "ls", "--json")
        assert ok(daemon, "import", str(snapshot_file)) == "snapshot e2e-cli\n"
        ok(daemon, "snapshot", "rm", "e2e-cli")

        imported = ok(daemon, "import", str(exported)).split()
        assert imported[1] == "parked" and imported[0] != sandbox_id  # the id is taken here
        made.append(imported[0])
        ok(daemon, "wake", imported[0])
        assert ok(daemon, "exec", imported[0], "--", "cat", "/root/f") == "kept\n"

        missing = daemon.cli("wake", "sb-doesnotexist1")
        assert missing.returncode == 1 and missing.stderr.startswith(b"error: ")
    finally:
        for sandbox in made:
            daemon.cli("kill", sandbox)
