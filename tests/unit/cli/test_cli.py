"""The `corral` CLI against the in-memory fake daemon: exit codes, streams and --json shapes."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from corral.cli._state import CLIState
from corral.cli.main import app
from corral.sdk.testing import CommandOutcome, FakeDaemon


@pytest.fixture
def fake() -> FakeDaemon:
    return FakeDaemon()


def corral(fake: FakeDaemon, *args: str, input: bytes | str | None = None) -> Result:
    state = CLIState(api_key=fake.api_key, transport=fake.transport)
    return CliRunner().invoke(app, list(args), input=input, obj=state, catch_exceptions=False)


def new_sandbox(fake: FakeDaemon) -> str:
    return str(fake.add_sandbox()["id"])


def test_new_prints_the_id_and_json_has_id_and_state(fake: FakeDaemon) -> None:
    plain = corral(fake, "new")
    assert plain.exit_code == 0
    assert plain.stdout.strip() in fake.sandboxes
    result = corral(
        fake, "new", "--cpu", "2", "--memory", "1024", "--env", "A=1", "--metadata", "k=v", "--json"
    )
    assert result.exit_code == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["state"] == "running"
    assert shown["id"] in fake.sandboxes
    assert (shown["cpu"], shown["memory_mib"], shown["env"]) == (2, 1024, {"A": "1"})


def test_bad_key_value_is_a_usage_error(fake: FakeDaemon) -> None:
    result = corral(fake, "new", "--env", "NOEQUALS")
    assert result.exit_code == 2
    assert "KEY=VALUE" in result.stderr


def test_ls_table_and_json(fake: FakeDaemon) -> None:
    sandbox_id = new_sandbox(fake)
    table = corral(fake, "ls")
    assert table.exit_code == 0
    assert sandbox_id in table.stdout
    assert "running" in table.stdout
    listed = json.loads(corral(fake, "ls", "--json", "--state", "running").stdout)
    assert [item["id"] for item in listed] == [sandbox_id]


def test_ls_hides_killed_sandboxes_unless_all(fake: FakeDaemon) -> None:
    live, gone = new_sandbox(fake), new_sandbox(fake)
    assert corral(fake, "kill", gone).exit_code == 0
    assert [s["id"] for s in json.loads(corral(fake, "ls", "--json").stdout)] == [live]
    every = json.loads(corral(fake, "ls", "--all", "--json").stdout)
    assert {s["id"] for s in every} == {live, gone}
    assert str(fake.requests[-1].url).endswith("all=true")


def test_info_and_kill(fake: FakeDaemon) -> None:
    sandbox_id = new_sandbox(fake)
    assert json.loads(corral(fake, "info", sandbox_id, "--json").stdout)["id"] == sandbox_id
    assert "running" in corral(fake, "info", sandbox_id).stdout
    assert corral(fake, "kill", sandbox_id).exit_code == 0
    assert fake.sandboxes[sandbox_id]["state"] == "killed"


def test_missing_sandbox_is_one_error_line_exit_1(fake: FakeDaemon) -> None:
    result = corral(fake, "info", "sbx-nope")
    assert result.exit_code == 1
    assert result.stderr == "error: no sandbox sbx-nope\n"
    assert result.stdout == ""


def test_exec_streams_output_and_exits_with_the_commands_code(fake: FakeDaemon) -> None:
    fake.run = lambda argv, stdin, timeout: CommandOutcome(
        stdout=b"out\xff", stderr=b"err", exit_code=3
    )
    result = corral(fake, "exec", new_sandbox(fake), "--env", "A=1", "--", "ls", "-la")
    assert result.exit_code == 3
    assert result.stdout_bytes == b"out\xff"  # raw bytes, not re-encoded text
    assert result.stderr == "err"
    body = json.loads(next(r for r in fake.requests if r.url.path.endswith("/exec")).content)
    assert body == {"cmd": ["ls", "-la"], "env": {"A": "1"}}


def test_exec_single_argument_with_shell_syntax_runs_through_the_shell(fake: FakeDaemon) -> None:
    corral(fake, "exec", new_sandbox(fake), "--", "echo hi | cat")
    body = json.loads(next(r for r in fake.requests if r.url.path.endswith("/exec")).content)
    assert body == {"shell": "echo hi | cat"}


def test_exec_timeout_exits_124_and_unstartable_exits_127(fake: FakeDaemon) -> None:
    sandbox_id = new_sandbox(fake)
    timed = corral(fake, "exec", sandbox_id, "--timeout", "1", "--", "sleep", "5")
    assert timed.exit_code == 124
    missing = corral(fake, "exec", sandbox_id, "--", "nosuchcmd")
    assert missing.exit_code == 127
    assert missing.stderr.startswith("error: ")


def test_exec_forwards_stdin_when_asked(fake: FakeDaemon) -> None:
    result = corral(fake, "exec", new_sandbox(fake), "--stdin", "--", "cat", input=b"piped\n")
    assert result.exit_code == 0
    assert result.stdout == "piped\n"


def test_files_write_read_ls_stat_mv_rm(fake: FakeDaemon) -> None:
    sandbox_id = new_sandbox(fake)
    data = bytes(range(256)) * 100
    assert corral(fake, "files", "write", sandbox_id, "/d/blob", input=data).exit_code == 0
    assert fake.files[sandbox_id]["/d/blob"] == data
    assert corral(fake, "files", "read", sandbox_id, "/d/blob").stdout_bytes == data
    listed = json.loads(corral(fake, "files", "ls", sandbox_id, "/d", "--json").stdout)
    assert [(e["name"], e["size"]) for e in listed] == [("blob", len(data))]
    assert "/d/blob" in corral(fake, "files", "ls", sandbox_id, "/d").stdout
    assert (
        json.loads(corral(fake, "files", "stat", sandbox_id, "/d/blob", "--json").stdout)["type"]
        == "file"
    )
    assert corral(fake, "files", "mkdir", sandbox_id, "/e").exit_code == 0
    assert corral(fake, "files", "mv", sandbox_id, "/d/blob", "/d/moved").exit_code == 0
    assert corral(fake, "files", "rm", sandbox_id, "/d/moved").exit_code == 0
    gone = corral(fake, "files", "read", sandbox_id, "/d/moved")
    assert (gone.exit_code, gone.stderr) == (1, "error: no file /d/moved\n")


def test_capacity_json_shape(fake: FakeDaemon) -> None:
    shown: dict[str, Any] = json.loads(corral(fake, "capacity", "--json").stdout)
    assert set(shown) == {"cpu", "memory", "disk", "cpu_overcommit"}
    for resource in ("cpu", "memory", "disk"):
        assert set(shown[resource]) == {"total", "reserved", "free"}
    assert shown["memory"] == {"total": 8192, "reserved": 512, "free": 7680}
    assert shown["cpu_overcommit"] == 8
    assert "overcommit" in corral(fake, "capacity").stdout


def test_template_ls(fake: FakeDaemon) -> None:
    assert [t["name"] for t in json.loads(corral(fake, "template", "ls", "--json").stdout)] == [
        "base"
    ]
    assert "base" in corral(fake, "template", "ls").stdout


def test_park_wake_fork_snapshot(fake: FakeDaemon) -> None:
    sandbox_id = new_sandbox(fake)
    assert corral(fake, "park", sandbox_id).stdout == f"{sandbox_id} parked\n"
    conflict = corral(fake, "park", sandbox_id)
    assert conflict.exit_code == 1
    assert "cannot park" in conflict.stderr
    assert corral(fake, "wake", sandbox_id).exit_code == 0
    forked = json.loads(corral(fake, "fork", sandbox_id, "--count", "2", "--json").stdout)
    assert len(forked) == 2
    assert all(child["id"] in fake.sandboxes for child in forked)
    assert corral(fake, "snapshot", sandbox_id, "snap1").stdout == "snap1\n"
    restored = corral(fake, "new", "--snapshot", "snap1", "--json")
    assert restored.exit_code == 0
    create = [r for r in fake.requests if r.method == "POST" and r.url.path == "/v1/sandboxes"]
    assert json.loads(create[-1].content)["snapshot"] == "snap1"


def test_unreachable_daemon_and_wrong_key_get_clear_messages(fake: FakeDaemon) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    state = CLIState(url="http://127.0.0.1:9", api_key="k", transport=httpx.MockTransport(refuse))
    down = CliRunner().invoke(app, ["ls"], obj=state)
    assert down.exit_code == 1
    assert "cannot reach the corral daemon at http://127.0.0.1:9" in down.stderr
    assert "Traceback" not in down.output

    wrong = CLIState(api_key="wrong", transport=fake.transport)
    denied = CliRunner().invoke(app, ["ls"], obj=wrong)
    assert denied.exit_code == 1
    assert "CORRAL_API_KEY" in denied.stderr


def test_missing_api_key_is_explained(fake: FakeDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CORRAL_API_KEY", raising=False)
    monkeypatch.setattr("corral.sdk.config.DEFAULT_KEY_FILE", fake_path := _absent())
    result = CliRunner().invoke(app, ["ls"], obj=CLIState(transport=fake.transport))
    assert result.exit_code == 1
    assert result.stderr.startswith("error: no corral API key")
    assert str(fake_path) in result.stderr


def _absent():  # type: ignore[no-untyped-def]
    from pathlib import Path

    return Path("/nonexistent/corral/admin.key")


def test_global_options_come_from_the_environment(fake: FakeDaemon) -> None:
    result = CliRunner().invoke(
        app,
        ["ls", "--json"],
        env={"CORRAL_API_KEY": fake.api_key, "CORRAL_URL": "http://fake:1"},
        obj=CLIState(transport=fake.transport),
    )
    assert result.exit_code == 0, result.stderr
    assert str(fake.requests[-1].url).startswith("http://fake:1/v1/sandboxes")


def test_serve_calls_the_daemon_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    import corral.api.server

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(corral.api.server, "serve", lambda **kwargs: calls.append(kwargs))
    result = CliRunner().invoke(app, ["serve", "--data-dir", "/tmp/d", "--listen", "0.0.0.0:1"])
    assert result.exit_code == 0, result.output
    assert [(str(c["data_dir"]), c["listen"]) for c in calls] == [("/tmp/d", "0.0.0.0:1")]


def test_usage_errors_exit_2() -> None:
    assert CliRunner().invoke(app, ["exec"]).exit_code == 2
    assert CliRunner().invoke(app, ["no-such-verb"]).exit_code == 2
