"""Snapshots (memory and files-only) restored into new sandboxes, and export/import of a parked
sandbox to a second daemon (once it trusts the first's key), with corrupted files refused."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from corral import Client, InvalidRequest, NotFound, Sandbox
from corral.sdk.errors import UntrustedExport
from tests.e2e.conftest import Daemon, leftover_namespaces, start_daemon, stop_daemon
from tests.e2e.workloads import assert_counting, is_running, read_count, start_counter

COUNT = "/root/count"  # on the sandbox's disk (/tmp is memory, not part of a files snapshot)


def test_memory_snapshot_restores_twice_and_fs_only_has_files_not_processes(
    daemon: Daemon,
) -> None:
    with Client(daemon.url, daemon.key) as client:
        source = client.create_sandbox(memory_mib=256)
        made: list[Sandbox] = [source]
        try:
            counter = start_counter(source, COUNT)
            source.files.write("/root/state.txt", "snapshotted")
            at_snapshot = read_count(source, COUNT)
            full = source.snapshot("e2e-mem")
            assert (full.name, full.kind, full.source_id) == ("e2e-mem", "memory", source.id)
            files_only = source.snapshot("e2e-fs", fs_only=True)
            assert files_only.kind == "fs"
            assert {"e2e-mem", "e2e-fs"} <= {s.name for s in client.snapshots()}
            source.files.write("/root/state.txt", "changed after")
            assert_counting(source, at_snapshot, COUNT)

            restored = [client.create_sandbox(snapshot="e2e-mem") for _ in range(2)]
            made += restored
            for sbx in restored:
                assert sbx.id != source.id
                assert sbx.files.read("/root/state.txt") == b"snapshotted"
                assert is_running(sbx, counter)
                assert_counting(sbx, at_snapshot, COUNT)
            restored[0].files.write("/root/state.txt", "diverged")
            with pytest.raises(InvalidRequest, match="disk cannot be changed"):
                client.create_sandbox(snapshot="e2e-mem", disk_mib=1024)
            assert restored[1].files.read("/root/state.txt") == b"snapshotted"

            from_files = client.create_sandbox(snapshot="e2e-fs")
            made.append(from_files)
            assert from_files.files.read("/root/state.txt") == b"snapshotted"
            assert not any(p.running for p in from_files.processes())
            frozen = read_count(from_files, COUNT)
            assert frozen >= 1  # the counter's last file came along, its process did not
            assert read_count(from_files, COUNT) == frozen
            assert from_files.exec("echo fresh").stdout == "fresh\n"

            client.remove_snapshot("e2e-mem")
            client.remove_snapshot("e2e-fs")
            with pytest.raises(NotFound):
                client.create_sandbox(snapshot="e2e-mem")
            # Removing a snapshot leaves the sandboxes restored from it alone.
            assert_counting(restored[1], at_snapshot, COUNT)
        finally:
            for sbx in made:
                sbx.kill()


def test_export_import_to_a_second_daemon_and_corrupt_files_refused(
    daemon: Daemon, tmp_path: Path
) -> None:
    export = tmp_path / "parked.corral"
    with Client(daemon.url, daemon.key) as client:
        sbx = client.create_sandbox(memory_mib=256)
        try:
            counter = start_counter(sbx)
            sbx.files.write("/root/moved.txt", "across hosts")
            at_park = read_count(sbx)
            sbx.park()
            size = sbx.export(export)
            assert size == export.stat().st_size > 0
            first_key = client.workspace_public_key()
        finally:
            sbx.kill()

    prefix = "cx" + secrets.token_hex(2)
    second = start_daemon(tmp_path / "second", prefix)
    try:
        with Client(second.url, second.key) as other:
            with pytest.raises(UntrustedExport, match="does not trust"):
                other.import_file(export)
            other.trust_key("first", first_key)
            damaged = tmp_path / "damaged.corral"
            with open(export, "rb") as source, open(damaged, "wb") as out:
                out.write(source.read())
            with open(damaged, "r+b") as out:
                out.seek(export.stat().st_size // 2)
                byte = out.read(1)
                out.seek(-1, 1)
                out.write(bytes([byte[0] ^ 0xFF]))
            with pytest.raises(InvalidRequest, match=r"corrupt|checksum|damaged"):
                other.import_file(damaged)
            truncated = tmp_path / "truncated.corral"
            with open(export, "rb") as source, open(truncated, "wb") as out:
                out.write(source.read(export.stat().st_size // 3))
            with pytest.raises(InvalidRequest):
                other.import_file(truncated)
            assert other.list_sandboxes() == []

            result = other.import_file(export)
            assert result.signer == "first"
            assert result.kind == "sandbox" and result.sandbox is not None
            assert result.sandbox.state == "parked"
            moved = other.sandbox(result.sandbox.id)
            assert moved.wake().state == "running"
            assert moved.files.read("/root/moved.txt") == b"across hosts"
            assert is_running(moved, counter)
            assert_counting(moved, at_park)
            moved.kill()
    finally:
        stop_daemon(second)
        assert not leftover_namespaces(prefix)
