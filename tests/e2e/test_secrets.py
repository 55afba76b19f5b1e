"""Secret-bearing sandboxes: their secrets reach the sandbox and nowhere else, and every copy of
their memory (fork, export, memory snapshot) is refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral import Client, Conflict
from tests.e2e.conftest import Daemon

SECRET = "s3cr3t-" + "value-never-shown-7f3a"


def test_secret_values_stay_inside_and_copies_are_refused(daemon: Daemon, tmp_path: Path) -> None:
    with Client(daemon.url, daemon.key) as client:
        sbx = client.create_sandbox(
            memory_mib=256, env={"PLAIN": "visible"}, secret_env={"API_TOKEN": SECRET}
        )
        try:
            assert sbx.exec("echo $API_TOKEN $PLAIN").stdout == f"{SECRET} visible\n"
            assert sbx.last_info.secret_env_keys == ["API_TOKEN"]

            for action in (lambda: sbx.fork(1), lambda: sbx.snapshot("e2e-secret-mem")):
                with pytest.raises(Conflict, match="secret") as refused:
                    action()
                assert refused.value.code == "secret_bearing"
            with pytest.raises(Conflict, match="allow_secrets"):
                sbx.snapshot("e2e-secret-fs", fs_only=True)
            files_only = sbx.snapshot("e2e-secret-fs", fs_only=True, allow_secrets=True)
            assert files_only.kind == "fs"
            client.remove_snapshot("e2e-secret-fs")

            sbx.park()  # parking keeps the memory on this host: allowed
            with pytest.raises(Conflict, match="secret"):
                sbx.export(tmp_path / "never.corral")
            assert not (tmp_path / "never.corral").exists()
            sbx.wake()
            assert sbx.exec("echo $API_TOKEN").stdout == f"{SECRET}\n"

            shown = [
                daemon.cli("info", sbx.id, "--json"),
                daemon.cli("info", sbx.id),
                daemon.cli("ls", "--json"),
                daemon.cli("snapshot", "ls", "--json"),
            ]
            for result in shown:
                assert result.returncode == 0, result.stderr
                assert SECRET.encode() not in result.stdout + result.stderr
            assert json.loads(shown[0].stdout)["secret_env_keys"] == ["API_TOKEN"]
            with daemon.client() as http:
                for path in ("/v1/sandboxes", f"/v1/sandboxes/{sbx.id}", "/openapi.json"):
                    assert SECRET not in http.get(path).text
            refusal = daemon.cli("fork", sbx.id)
            assert refusal.returncode == 1
            assert b"secret" in refusal.stderr and SECRET.encode() not in refusal.stderr
        finally:
            sbx.kill()
        assert SECRET not in daemon.log()
