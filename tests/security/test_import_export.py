"""Attacks on the host boundary of export/import and files-only snapshots, each performed against
real daemons (gVisor, network slots) and seen to fail:

- a crafted export whose record names a traversal id (into the test's own canary dir), or
  carries paths, wrong types, ranges or an unknown template: refused, nothing touched or left;
- tampered exports (a file changed after signing; re-checksummed; re-signed by another key);
- exports of another workspace: refused until `corral trust add`, then restored with memory;
  `--fs-only` brings in an untrusted fs snapshot and never a memory image;
- a files-only snapshot of a sandbox full of hostile names and symlinks to host paths, and one
  with too many files: the host's files stay untouched and the capture is bounded.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import secrets
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from corral import Client, InvalidRequest, NotFound
from corral.sdk.errors import UntrustedExport
from corral.service.auth import ApiKeys
from corral.service.snapshots.trust import SIGNING_CONTEXT, format_public_key
from corral.storage import Database
from tests.e2e.conftest import IMAGES_DIR, Daemon, leftover_namespaces, start_daemon, stop_daemon

pytestmark = pytest.mark.e2e

MAX_FILES = 10_000  # above the base image's own entries (a few thousand)


def _daemon(tmp: Path, tag: str) -> Iterator[Daemon]:
    if not (IMAGES_DIR / "base" / "image.json").exists():
        raise RuntimeError(f"the base image is missing from {IMAGES_DIR}: run ./scripts/setup")
    prefix = tag + secrets.token_hex(2)
    daemon = start_daemon(
        tmp / "data", prefix, extra_env={"CORRAL_SNAPSHOT_MAX_FILES": str(MAX_FILES)}
    )
    try:
        yield daemon
    finally:
        stop_daemon(daemon)
        assert not leftover_namespaces(prefix), daemon.log()[-3000:]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from _daemon(tmp_path_factory.mktemp("home"), "sh")


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from _daemon(tmp_path_factory.mktemp("peer"), "sp")


# ------------------------------------------------------------------------------ helpers
def signing_key(daemon: Daemon) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(
        (daemon.data_dir / "signing.key").read_bytes(), password=None
    )
    assert isinstance(key, Ed25519PrivateKey)
    return key


def craft(
    path: Path,
    kind: str,
    record: dict[str, Any],
    files: dict[str, bytes],
    key: Ed25519PrivateKey | None,
    *,
    manifest_files: dict[str, Any] | None = None,
) -> Path:
    """Write an export as an attacker would: any record, any files, signed by ``key``."""
    listed = manifest_files or {
        name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in files.items()
    }
    manifest = json.dumps(
        {"format": 2, "kind": kind, "record": record, "files": listed, "exported_at": time.time()}
    ).encode()
    signature = {}
    if key is not None:
        sig = key.sign(SIGNING_CONTEXT + manifest)
        signature = {"key": format_public_key(key.public_key()), "signature": _b64(sig)}
    members = [
        ("corral-export.json", manifest),
        ("corral-export.sig", json.dumps(signature).encode()),
    ]
    members += [("image/" + name, data) for name, data in files.items()]
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def read_members(path: Path) -> list[tuple[str, bytes]]:
    with tarfile.open(path) as tar:
        out = []
        for member in tar.getmembers():
            handle = tar.extractfile(member)
            assert handle is not None
            out.append((member.name, handle.read()))
        return out


def rewrite(path: Path, out: Path, members: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(out, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def tree(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry under ``root`` with its mode, mtime and (for files) content."""
    found = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath, name)
            st = p.lstat()
            data = p.read_bytes() if p.is_file() and not p.is_symlink() else b""
            found[str(p.relative_to(root))] = (st.st_mode, st.st_mtime_ns, data)
    return found


def make_canary(tmp: Path) -> Path:
    canary = tmp / "canary"
    (canary / "cron.d").mkdir(parents=True)
    (canary / "cron.d" / "keep").write_text("host file\n")
    (canary / "secret.txt").write_text("host secret\n")
    return canary


def live(client: Client) -> list[str]:
    return [s.id for s in client.list_sandboxes() if s.state != "killed"]


def leftovers(daemon: Daemon) -> list[str]:
    """What a refused import may have left in the daemon's data dir."""
    left = []
    for sub in ("parked", "work", "snapshots"):
        directory = daemon.data_dir / sub
        if directory.is_dir():
            left += [f"{sub}/{p.name}" for p in directory.iterdir()]
    return left


SANDBOX = {
    "template": "base",
    "cpu": 1.0,
    "memory_mib": 256,
    "disk_mib": 2048,
    "env": {},
    "metadata": {},
    "created_at": 1.0,
}


# ------------------------------------------------------------------------------- tests
def test_crafted_export_with_a_traversal_id_touches_nothing(home: Daemon, tmp_path: Path) -> None:
    canary = make_canary(tmp_path)
    before = tree(canary)
    parked = (home.data_dir / "parked").resolve()
    climb = "../" * (len(parked.parts) + 1)
    evil_id = "sb-/" + climb + str(canary / "cron.d").lstrip("/")
    assert (parked / evil_id).resolve() == (canary / "cron.d").resolve()  # the attack aims right
    image = {"checkpoint.img": b"\0" * 1024}
    key = signing_key(home)  # signed by the importer's own key: the schema is what stops it
    with Client(home.url, home.key) as client:
        for record, expect in [
            ({**SANDBOX, "id": evil_id}, "record.id: Extra inputs are not permitted"),
            ({**SANDBOX, "image_path": str(canary)}, "record.image_path: Extra inputs"),
        ]:
            export = craft(tmp_path / "evil.corral", "sandbox", record, image, key)
            with pytest.raises(InvalidRequest, match=expect):
                client.import_file(export)
        snapshot = {
            "name": "../" + climb + str(canary).lstrip("/"),
            "kind": "fs",
            "source_id": "sb-abc",
            **{k: v for k, v in SANDBOX.items() if k != "metadata"},
        }
        fs_files = {"files.tar": b"", "deleted.json": b"[]"}
        export = craft(tmp_path / "evil-snap.corral", "snapshot", snapshot, fs_files, key)
        with pytest.raises(InvalidRequest, match=r"record\.name"):
            client.import_file(export, fs_only=True)
        # A file name that climbs out of the image dir is refused by the manifest's schema.
        bad_name = {"../../" + str(canary / "x").lstrip("/"): b"x"}
        export = craft(tmp_path / "evil-file.corral", "sandbox", SANDBOX, bad_name, key)
        with pytest.raises(InvalidRequest, match="files"):
            client.import_file(export)
        assert live(client) == []
        assert client.snapshots() == []
    assert tree(canary) == before
    assert leftovers(home) == []


def test_imports_always_get_fresh_ids(home: Daemon, tmp_path: Path) -> None:
    with Client(home.url, home.key) as client:
        sbx = client.create_sandbox(memory_mib=256)
        try:
            sbx.files.write("/root/f", "kept")
            sbx.park()
            export = tmp_path / "parked.corral"
            sbx.export(export)
        finally:
            sbx.kill()
        first = client.import_file(export).sandbox
        second = client.import_file(export).sandbox
        assert first is not None and second is not None
        try:
            assert len({sbx.id, first.id, second.id}) == 3
            assert first.state == second.state == "parked"
            manifest = json.loads(read_members(export)[0][1])
            assert "id" not in manifest["record"] and sbx.id not in json.dumps(manifest)
            woken = client.sandbox(second.id)
            assert woken.wake().state == "running"
            assert woken.files.read("/root/f") == b"kept"
        finally:
            client.sandbox(first.id).kill()
            client.sandbox(second.id).kill()


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"cpu": "1"}, r"record\.cpu: Input should be a valid number"),
        ({"memory_mib": -5}, r"record\.memory_mib: Input should be greater than or equal to 1"),
        ({"cpu": 500.0}, r"cpu 500 is outside"),
        ({"template": "no-such-template"}, r"no-such-template"),
        ({"env": {"A": 1}}, r"record\.env\.A: Input should be a valid string"),
        ({"state": "running"}, r"record\.state: Extra inputs are not permitted"),
        ({"metadata": {"k": "v" * 5000}}, r"record\.metadata\.k: String should have at most"),
    ],
)
def test_manifest_fields_are_validated_and_nothing_is_left(
    home: Daemon, tmp_path: Path, change: dict[str, Any], expect: str
) -> None:
    export = craft(
        tmp_path / "bad.corral",
        "sandbox",
        {**SANDBOX, **change},
        {"checkpoint.img": b"\1" * 4096},
        signing_key(home),
    )
    with Client(home.url, home.key) as client:
        error = NotFound if "template" in change else InvalidRequest
        with pytest.raises(error, match=expect):
            client.import_file(export)
        assert live(client) == []
    assert leftovers(home) == []


def test_tampered_exports_are_refused(home: Daemon, tmp_path: Path) -> None:
    with Client(home.url, home.key) as client:
        sbx = client.create_sandbox(memory_mib=256)
        try:
            sbx.exec("echo 1 > /root/x")
            snap = sbx.snapshot("sec-tamper")
            assert snap.kind == "memory"
        finally:
            sbx.kill()
        export = tmp_path / "snap.corral"
        client.export_snapshot("sec-tamper", export)
        client.remove_snapshot("sec-tamper")
        members = read_members(export)
        names = [name for name, _ in members]
        assert names[:2] == ["corral-export.json", "corral-export.sig"]
        image_at = next(i for i, name in enumerate(names) if name.startswith("image/"))

        # 1. A file changed after signing: its checksum no longer matches the signed manifest.
        changed = list(members)
        data = bytearray(changed[image_at][1])
        data[len(data) // 2] ^= 0xFF
        changed[image_at] = (names[image_at], bytes(data))
        with pytest.raises(InvalidRequest, match="checksum mismatch"):
            client.import_file(rewrite(export, tmp_path / "t1.corral", changed))

        # 2. The attacker re-checksums the manifest: the signature no longer matches.
        manifest = json.loads(members[0][1])
        rel = names[image_at][len("image/") :]
        manifest["files"][rel] = {
            "size": len(data),
            "sha256": hashlib.sha256(bytes(data)).hexdigest(),
        }
        rechecked = [(names[0], json.dumps(manifest).encode()), *changed[1:]]
        with pytest.raises(UntrustedExport, match="altered after it was signed"):
            client.import_file(rewrite(export, tmp_path / "t2.corral", rechecked))

        # 3. ... and re-signs it with a key of their own: not a trusted signer.
        attacker = Ed25519PrivateKey.generate()
        body = json.dumps(manifest).encode()
        sig = {
            "key": format_public_key(attacker.public_key()),
            "signature": _b64(attacker.sign(SIGNING_CONTEXT + body)),
        }
        resigned = [(names[0], body), (names[1], json.dumps(sig).encode()), *changed[2:]]
        with pytest.raises(UntrustedExport, match="does not trust"):
            client.import_file(rewrite(export, tmp_path / "t3.corral", resigned))
        # A memory image is never taken under --fs-only, whoever signed it.
        with pytest.raises(UntrustedExport, match="memory snapshot"):
            client.import_file(rewrite(export, tmp_path / "t3.corral", resigned), fs_only=True)

        # 4. Unsigned.
        unsigned = [(names[0], members[0][1]), (names[1], b"{}"), *members[2:]]
        with pytest.raises(UntrustedExport, match="not signed"):
            client.import_file(rewrite(export, tmp_path / "t4.corral", unsigned))

        # 5. A link member smuggled in.
        with tarfile.open(tmp_path / "t5.corral", "w", format=tarfile.USTAR_FORMAT) as tar:
            for name, blob in members[:2]:
                info = tarfile.TarInfo(name)
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
            link = tarfile.TarInfo(names[image_at])
            link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
            tar.addfile(link)
        with pytest.raises(InvalidRequest, match="only regular files"):
            client.import_file(tmp_path / "t5.corral")

        assert client.snapshots() == []
        # The untouched export still imports: the checks above refused only what was altered.
        assert client.import_file(export).snapshot is not None
        client.remove_snapshot("sec-tamper")
    assert leftovers(home) == []


def test_another_workspaces_export_needs_trust_and_fs_only_drops_memory(
    home: Daemon, peer: Daemon, tmp_path: Path
) -> None:
    mem_file, fs_file = tmp_path / "mem.corral", tmp_path / "fs.corral"
    with Client(peer.url, peer.key) as theirs:
        sbx = theirs.create_sandbox(memory_mib=256)
        try:
            sbx.files.write("/root/origin.txt", "from the peer")
            sbx.snapshot("sec-peer-mem")
            sbx.snapshot("sec-peer-fs", fs_only=True)
        finally:
            sbx.kill()
        theirs.export_snapshot("sec-peer-mem", mem_file)
        theirs.export_snapshot("sec-peer-fs", fs_file)
        theirs.remove_snapshot("sec-peer-mem")
        theirs.remove_snapshot("sec-peer-fs")
    peer_key = peer.cli("trust", "show").stdout.decode().strip()
    assert peer_key.startswith("ed25519:")

    refused = home.cli("import", str(mem_file))
    assert refused.returncode == 1
    message = refused.stderr.decode()
    assert "does not trust" in message and "corral trust add" in message
    assert "--fs-only" in message
    # --fs-only never takes the memory image: a memory snapshot's files are inside it.
    only_files = home.cli("import", str(mem_file), "--fs-only")
    assert only_files.returncode == 1 and "memory snapshot" in only_files.stderr.decode()
    assert leftovers(home) == []

    # The fs snapshot comes in under --fs-only, and restores its files.
    assert home.cli("import", str(fs_file)).returncode == 1
    imported = home.cli("import", str(fs_file), "--fs-only", "--json")
    assert imported.returncode == 0, imported.stderr.decode()
    result = json.loads(imported.stdout)
    assert result["snapshot"]["kind"] == "fs" and result["signer"] is None
    with Client(home.url, home.key) as client:
        restored = client.create_sandbox(snapshot="sec-peer-fs")
        try:
            assert restored.files.read("/root/origin.txt") == b"from the peer"
            assert not any(p.running for p in restored.processes())
        finally:
            restored.kill()
        client.remove_snapshot("sec-peer-fs")

    # Once trusted, the memory snapshot comes in whole; after `trust rm` it is refused again.
    added = home.cli("trust", "add", "peer", peer_key)
    assert added.returncode == 0, added.stderr.decode()
    listed = json.loads(home.cli("trust", "ls", "--json").stdout)
    assert [(k["name"], k["public_key"]) for k in listed] == [("peer", peer_key)]
    ok = home.cli("import", str(mem_file), "--json")
    assert ok.returncode == 0, ok.stderr.decode()
    assert json.loads(ok.stdout)["signer"] == "peer"
    with Client(home.url, home.key) as client:
        restored = client.create_sandbox(snapshot="sec-peer-mem")
        try:
            assert restored.files.read("/root/origin.txt") == b"from the peer"
        finally:
            restored.kill()
        client.remove_snapshot("sec-peer-mem")
    assert home.cli("trust", "rm", "peer").returncode == 0
    again = home.cli("import", str(mem_file))
    assert again.returncode == 1 and "does not trust" in again.stderr.decode()
    assert leftovers(home) == []


def test_trust_routes_need_an_admin_key(home: Daemon) -> None:
    # A viewer key, made in the daemon's store as `corral key create --role viewer` would.
    db = Database(home.data_dir / "corral.db")
    try:
        viewer = ApiKeys(db).create("viewer-sec", role="viewer")
    finally:
        db.close()
    with httpx.Client(base_url=home.url, headers={"Authorization": f"Bearer {viewer}"}) as http:
        answer = http.post("/v1/trust", json={"name": "x", "public_key": "ed25519:AAAA"})
        assert answer.status_code == 403 and answer.json()["code"] == "forbidden"
        assert http.get("/v1/trust").status_code == 403
    with home.client() as admin:
        assert admin.get("/v1/trust").json()["keys"] == []


def test_fs_snapshot_of_hostile_names_leaves_host_files_alone_and_is_bounded(
    home: Daemon, tmp_path: Path
) -> None:
    canary = make_canary(tmp_path)
    before = tree(canary)
    host_secret = canary / "secret.txt"
    hostile = f"""
import os
os.makedirs("/root/h", exist_ok=True)
os.chdir("/root/h")
os.symlink({str(host_secret)!r}, "to-host-secret")
os.symlink({str(canary)!r}, "to-canary-dir")
os.symlink("../../../../../../../../{str(canary).lstrip("/")}", "climb")
os.symlink("/", "root-link")
for name in ["...", "a\\nb", " lead", "back\\\\slash", "x" * 250, "dot.."]:
    open(name, "w").write(name)
open(os.fsdecode(b"bad-\\xff-utf8"), "w").write("raw")
os.makedirs("d/e/f", exist_ok=True)
open("d/e/f/deep", "w").write("deep")
"""
    with Client(home.url, home.key) as client:
        sbx = client.create_sandbox(memory_mib=256)
        made = [sbx]
        try:
            assert sbx.exec(["python3", "-c", hostile]).exit_code == 0
            # Too many files: refused, with the limit named, and nothing kept.
            many = "import os\nos.makedirs('/root/many')\n" + (
                f"for i in range({MAX_FILES}): open('/root/many/%d' % i, 'w').close()\n"
            )
            assert sbx.exec(["python3", "-c", many]).exit_code == 0
            with pytest.raises(InvalidRequest, match=f"more than {MAX_FILES} files"):
                sbx.snapshot("sec-hostile", fs_only=True)
            assert "sec-hostile" not in {s.name for s in client.snapshots()}
            assert sbx.exec("rm -rf /root/many").exit_code == 0

            snap = sbx.snapshot("sec-hostile", fs_only=True)
            assert snap.kind == "fs" and snap.size_mib < 16
            restored = client.create_sandbox(snapshot="sec-hostile")
            made.append(restored)
            check = (
                "import os; h = '/root/h'; "
                "print(os.readlink(h + '/to-host-secret')); "
                "print(os.path.exists(h + '/to-host-secret')); "
                "print(open(h + '/...').read(), open(h + '/d/e/f/deep').read())"
            )
            out = restored.exec(["python3", "-c", check]).stdout.splitlines()
            listed = restored.exec(["ls", "-a", "/root/h"]).stdout.split("\n")
            assert {"...", "dot..", " lead", "x" * 250, "root-link", "climb"} <= set(listed)
            # The link came back as a link inside the sandbox; the host's file is not there.
            assert out[0] == str(host_secret)
            assert out[1] == "False"
            assert out[2] == "... deep"
        finally:
            for sandbox in made:
                sandbox.kill()
            if "sec-hostile" in {s.name for s in client.snapshots()}:
                client.remove_snapshot("sec-hostile")
    assert tree(canary) == before
