"""What a user of the SDK relies on, asserted alike against the fake daemon and a real one:
sandboxes (create, list, park/wake, fork, kill), processes (exec, exit codes, stdin,
background), files (write, read, list, stat, move, remove) and snapshots, and the errors each
raises. A difference between the two fails here rather than in a user's test suite."""

from __future__ import annotations

import pytest

from corral import Conflict, NotFound
from tests.contract.conftest import Backend


def test_sandboxes_create_list_park_wake_fork_kill(backend: Backend) -> None:
    client = backend.client
    tag = {"contract": backend.scratch}
    sbx = client.create_sandbox(metadata=tag, memory_mib=256)
    assert sbx.info().state == "running"
    assert sbx.last_info.metadata == tag
    assert [s.id for s in client.list_sandboxes(metadata=tag)] == [sbx.id]
    assert client.connect(sbx.id).id == sbx.id
    with pytest.raises(NotFound):
        client.connect("sb-doesnotexist")

    assert sbx.park().state == "parked"
    with pytest.raises(Conflict):
        sbx.park()
    assert sbx.wake().state == "running"

    sbx.files.write(f"{backend.scratch}/inherited", b"from the parent")
    [child] = sbx.fork(1)
    assert child.id != sbx.id
    assert child.files.read(f"{backend.scratch}/inherited") == b"from the parent"
    assert child.info().parent_id == sbx.id

    child.kill()
    child.kill()  # already gone: not an error
    live = {s.id for s in client.list_sandboxes(metadata=tag)}
    assert live == {sbx.id}
    every = {s.id: s.state for s in client.list_sandboxes(metadata=tag, all=True)}
    assert every[child.id] == "killed"
    sbx.kill()


def test_processes_exec_exit_codes_stdin_and_background(backend: Backend) -> None:
    with backend.client.create_sandbox(memory_mib=256) as sbx:
        done = sbx.exec("echo hello")
        assert (done.exit_code, done.stdout, done.stderr) == (0, "hello\n", "")
        assert sbx.exec("exit 3").exit_code == 3
        assert sbx.exec(["false"]).exit_code == 1
        assert sbx.exec(["cat"], stdin=b"piped in").stdout == "piped in"
        streamed: list[str] = []
        sbx.exec(["echo", "streamed"], on_stdout=streamed.append)
        assert "".join(streamed) == "streamed\n"

        background = sbx.exec_background(["echo", "later"])
        assert background.wait().stdout == "later\n"
        assert background.pid in [p.pid for p in sbx.processes()]
        assert sbx.process(background.pid).info().running is False


def test_files_write_read_list_stat_move_remove(backend: Backend) -> None:
    d = backend.scratch
    with backend.client.create_sandbox(memory_mib=256) as sbx:
        written = sbx.files.write(f"{d}/a.txt", "héllo")
        assert written.size == len("héllo".encode())
        assert sbx.files.read_text(f"{d}/a.txt") == "héllo"
        assert sbx.files.stat(f"{d}/a.txt").size == 6
        assert sbx.files.exists(f"{d}/a.txt")
        assert [e.name for e in sbx.files.list(d)] == ["a.txt"]
        moved = sbx.files.move(f"{d}/a.txt", f"{d}/b.txt")
        assert moved.path == f"{d}/b.txt"
        assert not sbx.files.exists(f"{d}/a.txt")
        sbx.files.remove(f"{d}/b.txt")
        with pytest.raises(NotFound):
            sbx.files.read(f"{d}/b.txt")
        with pytest.raises(NotFound):
            sbx.files.stat(f"{d}/nothing-here")


def test_snapshots_save_restore_and_remove(backend: Backend) -> None:
    client, d = backend.client, backend.scratch
    name = "contract-" + d.rsplit("-", 1)[1]
    with client.create_sandbox(memory_mib=256) as sbx:
        sbx.files.write(f"{d}/kept", b"in the snapshot")
        saved = sbx.snapshot(name, fs_only=True)
        assert (saved.name, saved.kind, saved.source_id) == (name, "fs", sbx.id)
        with pytest.raises(Conflict):
            sbx.snapshot(name, fs_only=True)
    assert name in [s.name for s in client.snapshots()]
    with client.create_sandbox(snapshot=name) as restored:
        assert restored.files.read(f"{d}/kept") == b"in the snapshot"
    client.remove_snapshot(name)
    with pytest.raises(NotFound):
        client.get_snapshot(name)
