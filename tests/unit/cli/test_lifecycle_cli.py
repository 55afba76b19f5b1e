"""`corral park/wake/fork/snapshot/export/import` and the lifecycle options of `corral new`,
against the in-memory fake daemon: argument shapes, output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from corral.cli._state import CLIState
from corral.cli.main import app
from corral.sdk.testing import FakeDaemon


@pytest.fixture
def fake() -> FakeDaemon:
    return FakeDaemon()


def corral(fake: FakeDaemon, *args: str) -> Result:
    state = CLIState(api_key=fake.api_key, transport=fake.transport)
    return CliRunner().invoke(app, list(args), obj=state, catch_exceptions=False)


def last_body(fake: FakeDaemon, path: str) -> dict[str, object]:
    sent = [r for r in fake.requests if r.method == "POST" and r.url.path == path]
    return dict(json.loads(sent[-1].content))


def test_snapshot_id_name_coexists_with_ls_and_rm(fake: FakeDaemon) -> None:
    sandbox_id = str(fake.add_sandbox()["id"])
    assert corral(fake, "snapshot", sandbox_id, "full").stdout == "full\n"
    assert last_body(fake, f"/v1/sandboxes/{sandbox_id}/snapshots") == {"name": "full"}
    files_only = corral(fake, "snapshot", sandbox_id, "files", "--fs-only", "--json")
    assert json.loads(files_only.stdout)["kind"] == "fs"
    assert corral(fake, "snapshot", "--fs-only", sandbox_id, "files2").exit_code == 0
    assert corral(fake, "snapshot", "take", sandbox_id, "long-form").exit_code == 0

    listed = json.loads(corral(fake, "snapshot", "ls", "--json").stdout)
    assert [s["name"] for s in listed] == ["full", "files", "files2", "long-form"]
    assert listed[0]["source_id"] == sandbox_id
    table = corral(fake, "snapshot", "ls").stdout
    assert "full" in table and "memory" in table

    assert corral(fake, "snapshot", "rm", "files", "files2").exit_code == 0
    assert set(fake.snapshots) == {"full", "long-form"}
    missing = corral(fake, "snapshot", "rm", "files")
    assert (missing.exit_code, "not found" in missing.stderr) == (1, True)
    assert "take" in corral(fake, "snapshot", "--help").stdout


def test_new_passes_lifecycle_options_and_never_shows_secret_values(fake: FakeDaemon) -> None:
    made = corral(
        fake,
        "new",
        "--secret-env",
        "TOKEN=hunter2",
        "--on-timeout",
        "park",
        "--ttl",
        "60",
        "--auto-park-idle",
        "30",
        "--auto-wake",
        "--json",
    )
    assert made.exit_code == 0, made.stderr
    body = last_body(fake, "/v1/sandboxes")
    assert body["secret_env"] == {"TOKEN": "hunter2"}
    assert (body["on_timeout"], body["auto_park_idle"], body["auto_wake"]) == ("park", 30, True)
    shown = json.loads(made.stdout)
    assert shown["secret_env_keys"] == ["TOKEN"]
    for output in (made.stdout, corral(fake, "info", shown["id"]).stdout):
        assert "hunter2" not in output
    assert "TOKEN" in corral(fake, "info", shown["id"]).stdout
    plain = corral(fake, "new")
    assert "on_timeout" not in last_body(fake, "/v1/sandboxes")  # kill is the daemon's default
    assert plain.exit_code == 0
    bad = corral(fake, "new", "--on-timeout", "explode")
    assert bad.exit_code == 2


def test_secret_bearing_refusals_say_why(fake: FakeDaemon) -> None:
    sandbox_id = str(fake.add_sandbox(secret_env_keys=["TOKEN"])["id"])
    for args in (("fork", sandbox_id), ("snapshot", sandbox_id, "s")):
        refused = corral(fake, *args)
        assert refused.exit_code == 1
        assert "secrets" in refused.stderr


def test_export_and_import_a_parked_sandbox_and_a_snapshot(
    fake: FakeDaemon, tmp_path: Path
) -> None:
    sandbox_id = str(fake.add_sandbox()["id"])
    fake.files[sandbox_id]["/work/a"] = b"kept"
    not_parked = corral(fake, "export", sandbox_id, str(tmp_path / "x.tar"))
    assert not_parked.exit_code == 1
    assert not (tmp_path / "x.tar").exists()
    assert not list(tmp_path.iterdir())  # no half-written file left behind

    corral(fake, "park", sandbox_id)
    exported = corral(fake, "export", sandbox_id, str(tmp_path / "sbx.tar"))
    assert exported.exit_code == 0, exported.stderr
    assert f"exported sandbox {sandbox_id}" in exported.stdout
    imported = json.loads(corral(fake, "import", str(tmp_path / "sbx.tar"), "--json").stdout)
    assert imported["kind"] == "sandbox"
    assert imported["sandbox"]["state"] == "parked"
    assert fake.files[imported["sandbox"]["id"]] == {"/work/a": b"kept"}

    corral(fake, "wake", sandbox_id)
    corral(fake, "snapshot", sandbox_id, "snap")
    assert corral(fake, "export", "snapshot:snap", str(tmp_path / "a.tar")).exit_code == 0
    assert corral(fake, "export", "--snapshot", "snap", str(tmp_path / "b.tar")).exit_code == 0
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    corral(fake, "snapshot", "rm", "snap")
    assert corral(fake, "import", str(tmp_path / "a.tar")).stdout == "snapshot snap\n"
    assert "snap" in fake.snapshots

    usage = corral(fake, "export", "--snapshot", "snap", "one.tar", "two.tar")
    assert usage.exit_code == 2
    assert corral(fake, "export", sandbox_id).exit_code == 2
