"""Brokered secrets end to end: a real daemon and gVisor sandboxes whose egress leads to a fake
upstream behind its own test CA, in a namespace this module makes (``hostlab.upstream_lab``:
HTTPS on two addresses, plain HTTP, DNS; only a veth and one route of our own, removed
afterwards).

The upstream sees the real value; the sandbox never does -- not in its env, files, /proc, its
memory image after a park, its export, the daemon's log or any API answer -- and every request
that must not get the value (an unbound host, a Host or address that disagrees with the SNI, a
redirect to another host, plain HTTP) carries the placeholder.
"""

from __future__ import annotations

import base64
import json
import secrets
import struct
import subprocess
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral import Client, Sandbox
from tests.e2e.conftest import (
    Daemon,
    free_port,
    free_subnet,
    leftover_namespaces,
    start_daemon,
    stop_daemon,
)
from tests.e2e.hostlab import HostLab, daemon_env, page, upstream_lab

VALUE = "live-" + secrets.token_hex(12)
VALUE2 = "rotated-" + secrets.token_hex(12)
AWS_KEY_ID, AWS_SECRET = "AKIDREAL" + secrets.token_hex(4).upper(), "aws-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostLab]:
    with upstream_lab(tmp_path_factory.mktemp("broker-lab"), AWS_KEY_ID, AWS_SECRET) as made:
        yield made


@dataclass
class Place:
    """Where the module's daemon lives, so that a restart can come back to the same place."""

    data_dir: Path
    prefix: str
    subnet: str
    port: int


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Place:
    data_dir = tmp_path_factory.mktemp("brokerd") / "data"
    return Place(data_dir, "cb" + secrets.token_hex(2), free_subnet(), free_port())


@pytest.fixture(scope="module")
def brokerd(place: Place, lab: HostLab) -> Iterator[Daemon]:
    daemon = start_daemon(
        place.data_dir, place.prefix, place.subnet, place.port, extra_env=daemon_env(lab)
    )
    try:
        yield daemon
    finally:
        stop_daemon(daemon)
        left = leftover_namespaces(place.prefix)
        for name in left:
            if name.startswith("nft:"):
                subprocess.run(["nft", "delete", "table", "inet", place.prefix], check=False)
            else:
                subprocess.run(["ip", "netns", "del", name], check=False)
        assert not left, f"namespaces left behind: {left}\n{daemon.log()[-4000:]}"


@pytest.fixture(scope="module")
def sbx(brokerd: Daemon) -> Iterator[Sandbox]:
    """Secrets set through the CLI (values on stdin), a sandbox made with `corral new`."""
    made = brokerd.cli(
        "secret",
        "set",
        "API_TOKEN",
        "--preset",
        "http",
        "--host",
        "api.sec.test",
        "--body",
        input=VALUE.encode() + b"\n",
    )
    assert made.returncode == 0, made.stderr
    made = brokerd.cli(
        "secret",
        "set",
        "AWS",
        "--preset",
        "aws",
        "--host",
        "s3.sec.test",
        input=f"{AWS_KEY_ID}:{AWS_SECRET}".encode(),
    )
    assert made.returncode == 0, made.stderr
    created = brokerd.cli(
        "new",
        "--network",
        "internet",
        "--secret",
        "API_TOKEN",
        "--secret",
        "AWS",
        "--secret-file",
        "API_TOKEN:/root/.api-token",
        "--json",
    )
    assert created.returncode == 0, created.stderr
    sandbox_id = json.loads(created.stdout)["id"]
    with Client(brokerd.url, brokerd.key) as client:
        sandbox = client.sandbox(sandbox_id)
        try:
            yield sandbox
        finally:
            sandbox.kill()


def image_bytes(path: Path) -> bytes:
    """A file of a memory image as bytes to search: a gVisor state file ("gVisorSF", metadata,
    32-byte HMAC, chunk size, then [length][raw deflate] chunks) decompressed, else as is."""
    data = path.read_bytes()
    if not data.startswith(b"gVisorSF"):
        return data
    pos = 16 + struct.unpack(">Q", data[8:16])[0] + 32 + 4
    out = []
    while pos + 4 <= len(data):
        size = struct.unpack(">I", data[pos : pos + 4])[0]
        out.append(zlib.decompressobj(-15).decompress(data[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    return b"".join(out)


def sh(sbx: Sandbox, script: str) -> str:
    result = sbx.exec(["sh", "-c", script], timeout=30)
    assert result.exit_code == 0, f"{script}: {result.exit_code} {result.stdout} {result.stderr}"
    return result.stdout


def saw(request: dict[str, object], header: str) -> str:
    return (
        str(request["headers"]).lower()
        if header == "*"
        else str(
            request["headers"].get(header, "")  # type: ignore[attr-defined]
        )
    )


def test_the_upstream_gets_the_value_where_the_binding_allows(
    brokerd: Daemon, sbx: Sandbox, lab: HostLab
) -> None:
    placeholder = sh(sbx, 'printf %s "$API_TOKEN"')
    assert placeholder.startswith("corral-ph-") and VALUE not in placeholder
    assert "API_TOKEN AWS (brokered)" in brokerd.cli("info", sbx.id).stdout.decode()
    assert sh(sbx, "cat /root/.api-token").strip() == placeholder
    # curl trusts the broker's CA through the system bundle; python through SSL_CERT_FILE.
    assert sh(
        sbx,
        'curl -sS -H "Authorization: Bearer $API_TOKEN" "https://api.sec.test/get?key=$API_TOKEN"',
    ) == page(lab.web)
    got = lab.last("/get")
    assert saw(got, "authorization") == f"Bearer {VALUE}"
    assert got["target"] == f"/get?key={VALUE}"
    sh(sbx, 'curl -sS -u "x-access-token:$API_TOKEN" https://api.sec.test/basic')
    basic = saw(lab.last("/basic"), "authorization")
    assert base64.b64decode(basic.split()[1]).decode() == f"x-access-token:{VALUE}"
    sh(sbx, 'curl -sS -d "{\\"key\\": \\"$API_TOKEN\\"}" https://api.sec.test/post')
    assert lab.last("/post")["body"] == f'{{"key": "{VALUE}"}}'
    sh(
        sbx,
        "python3 -c \"import os, urllib.request as u; r = u.Request('https://api.sec.test/py',"
        " headers={'X-Key': os.environ['API_TOKEN']}); print(u.urlopen(r).read())\"",
    )
    assert saw(lab.last("/py"), "x-key") == VALUE


def test_every_other_request_carries_the_placeholder(sbx: Sandbox, lab: HostLab) -> None:
    placeholder = sh(sbx, 'printf %s "$API_TOKEN"')
    head = '-H "X-Key: $API_TOKEN"'
    # An unbound host: spliced, so the sandbox sees the upstream's own (untrusted) certificate.
    sh(sbx, f"curl -sSk {head} https://other.sec.test/unbound")
    # A Host that disagrees with the SNI.
    sh(sbx, f'curl -sS {head} -H "Host: other.sec.test" https://api.sec.test/hostmismatch')
    # The bound name, but at an address its resolver never gave for it.
    sh(sbx, f"curl -sSk {head} --resolve api.sec.test:443:{lab.other} https://api.sec.test/addr")
    # A redirect to another host: the second request goes to an unbound name.
    sh(sbx, f"curl -sSk -L --location-trusted {head} https://api.sec.test/redirect")
    # Plain HTTP to the bound host.
    sh(sbx, f"curl -sS {head} http://api.sec.test/plain")
    for target in ("/unbound", "/hostmismatch", "/addr", "/landing", "/plain"):
        got = lab.last(target)
        assert saw(got, "x-key") == placeholder, (target, got)
        assert VALUE not in json.dumps(got)
    assert lab.last("/addr")["server"] == lab.other and lab.last("/landing")["server"] == lab.other
    assert saw(lab.last("/redirect"), "x-key") == VALUE  # the bound request itself did get it


def test_sigv4_is_resigned_with_the_real_keys(sbx: Sandbox, lab: HostLab) -> None:
    out = sh(
        sbx,
        'curl -sS --aws-sigv4 "aws:amz:us-east-1:s3" '
        '--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" '
        "-X PUT --data-binary object-data https://s3.sec.test/bucket/key.txt",
    )
    assert out == "verified\n"
    got = lab.last("/bucket/key.txt")
    assert got["sigv4_valid"] is True and AWS_KEY_ID in saw(got, "authorization")
    assert AWS_SECRET not in sh(sbx, "env")


def test_the_value_is_nowhere_in_the_sandbox_its_image_export_or_answers(
    brokerd: Daemon, sbx: Sandbox, lab: HostLab, tmp_path: Path
) -> None:
    values = (VALUE, AWS_SECRET)
    sh(sbx, 'curl -sS -H "X-Key: $API_TOKEN" https://api.sec.test/audited')
    # Everything the sandbox's processes and files hold is read out and searched here, on the
    # host (a search inside would put the value into the sandbox, in its own argv).
    dump = sbx.exec(
        [
            "sh",
            "-c",
            "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null; "
            "find /root /tmp /etc /run /var/tmp -xdev -type f -size -4M -exec cat {} + 2>/dev/null;"
            " true",
        ],
        timeout=60,
    ).stdout
    assert "corral-ph-" in dump and "BEGIN CERTIFICATE" in dump  # it did read env and files
    assert all(v not in dump for v in values)
    answers = [
        brokerd.cli("info", sbx.id, "--json").stdout,
        brokerd.cli("ls", "--json").stdout,
        brokerd.cli("secret", "ls", "--json").stdout,
        brokerd.cli("secret", "log", "--json").stdout,
    ]
    with brokerd.client() as http:
        answers += [http.get(p).content for p in ("/v1/secrets", "/v1/sandboxes", "/openapi.json")]
    for answer in answers:
        assert all(v.encode() not in answer for v in values)
    log = json.loads(brokerd.cli("secret", "log", "API_TOKEN", "--json").stdout)
    assert (sbx.id, "api.sec.test", "GET", "/audited") in {
        (e["sandbox_id"], e["host"], e["method"], e["path"]) for e in log
    }
    # A memory snapshot is allowed (nothing secret inside); park, search the image, export it.
    assert brokerd.cli("snapshot", sbx.id, "brokered-snap").returncode == 0
    assert brokerd.cli("park", sbx.id).returncode == 0
    image = [p for p in (brokerd.data_dir / "parked").rglob("*") if p.is_file()]
    assert image
    placeholder_seen = False
    for path in image:
        data = image_bytes(path)
        assert all(v.encode() not in data for v in values), path
        placeholder_seen |= b"corral-ph-" in data
    assert placeholder_seen  # the search looked where the env lives
    exported = tmp_path / "export.tar"
    assert brokerd.cli("export", sbx.id, str(exported)).returncode == 0
    unpacked = tmp_path / "unpacked"
    with tarfile.open(exported) as tar:
        tar.extractall(unpacked, filter="data")
    members = [p for p in unpacked.rglob("*") if p.is_file()]
    assert any(p.name == "checkpoint.img" for p in members)
    for path in members:
        assert all(v.encode() not in image_bytes(path) for v in values), path
    assert brokerd.cli("wake", sbx.id).returncode == 0
    sh(sbx, 'curl -sS -H "X-Key: $API_TOKEN" https://api.sec.test/afterwake')
    assert saw(lab.last("/afterwake"), "x-key") == VALUE
    assert all(v not in brokerd.log() for v in values)


def test_a_fork_is_brokered_too(brokerd: Daemon, sbx: Sandbox, lab: HostLab) -> None:
    forked = json.loads(brokerd.cli("fork", sbx.id, "--json").stdout)
    with Client(brokerd.url, brokerd.key) as client:
        child = client.sandbox(forked[0]["id"])
        try:
            sh(child, 'curl -sS -H "X-Key: $API_TOKEN" https://api.sec.test/fromfork')
            assert saw(lab.last("/fromfork"), "x-key") == VALUE
            log = client.secret_log("API_TOKEN", child.id)
            assert [e.path for e in log] == ["/fromfork"]
        finally:
            child.kill()


def test_a_memory_snapshot_restores_with_its_bindings(
    brokerd: Daemon, sbx: Sandbox, lab: HostLab
) -> None:
    taken = brokerd.cli("snapshot", sbx.id, "restore-me")
    assert taken.returncode == 0, taken.stderr
    restored = brokerd.cli("new", "--snapshot", "restore-me", "--json")
    assert restored.returncode == 0, restored.stderr
    with Client(brokerd.url, brokerd.key) as client:
        child = client.sandbox(json.loads(restored.stdout)["id"])
        try:
            sh(child, 'curl -sS -H "X-Key: $API_TOKEN" https://api.sec.test/fromsnapshot')
            assert saw(lab.last("/fromsnapshot"), "x-key") == VALUE
        finally:
            child.kill()


def test_sdk_sandboxes_get_their_own_placeholders(
    brokerd: Daemon, sbx: Sandbox, lab: HostLab
) -> None:
    with Client(brokerd.url, brokerd.key) as client:
        info = client.set_secret("SDK_KEY", VALUE2, hosts=["api.sec.test"], header="x-sdk-key")
        assert info.header == "x-sdk-key" and VALUE2 not in repr(info)
        other = client.create_sandbox(network="internet", secrets=["API_TOKEN", "SDK_KEY"])
        try:
            assert other.info().brokered_secrets == ["API_TOKEN", "SDK_KEY"]
            mine = sh(other, 'printf %s "$API_TOKEN"')
            assert mine.startswith("corral-ph-") and mine != sh(sbx, 'printf %s "$API_TOKEN"')
            sh(
                other,
                'curl -sS -H "X-Sdk-Key: $SDK_KEY" -H "X-Other: $SDK_KEY" https://api.sec.test/sdk',
            )
            got = lab.last("/sdk")
            assert saw(got, "x-sdk-key") == VALUE2  # only its header gets it
            assert saw(got, "x-other") == sh(other, 'printf %s "$SDK_KEY"')
        finally:
            other.kill()
            client.remove_secret("SDK_KEY")


def test_rotation_and_revocation_apply_to_the_running_sandbox(
    brokerd: Daemon, sbx: Sandbox, lab: HostLab
) -> None:
    # The next request after a rotation gets the new value (kept-alive connections too:
    # tests/integration/network/test_broker.py).
    rotated = brokerd.cli("secret", "rotate", "API_TOKEN", input=VALUE2.encode())
    assert rotated.returncode == 0, rotated.stderr
    sh(sbx, 'curl -sS -H "X-Key: $API_TOKEN" https://api.sec.test/rotated')
    assert saw(lab.last("/rotated"), "x-key") == VALUE2
    revoked = brokerd.cli("secret", "revoke", "API_TOKEN", "--sandbox", sbx.id)
    assert revoked.returncode == 0, revoked.stderr
    placeholder = sh(sbx, 'printf %s "$API_TOKEN"')
    sh(sbx, 'curl -sSk -H "X-Key: $API_TOKEN" https://api.sec.test/revoked')
    assert saw(lab.last("/revoked"), "x-key") == placeholder


def test_a_restarted_daemon_brokers_for_the_sandboxes_it_adopts(
    brokerd: Daemon, place: Place, sbx: Sandbox, lab: HostLab
) -> None:
    """The CA, the sealed values and the bindings are on disk: after a restart the running
    sandbox's trust store still matches and its placeholder still works."""
    stop_daemon(brokerd, kill_sandboxes=False)
    again = start_daemon(
        place.data_dir, place.prefix, place.subnet, place.port, extra_env=daemon_env(lab)
    )
    brokerd.process = again.process  # the module's fixture stops this one at the end
    assert sbx.info().state == "running"
    sh(sbx, 'curl -sS -H "X-Key: $AWS_ACCESS_KEY_ID" https://s3.sec.test/restart-unbound')
    assert "corral-ph-" in saw(lab.last("/restart-unbound"), "x-key")  # AWS is re-signed only
    out = sh(
        sbx,
        'curl -sS --aws-sigv4 "aws:amz:us-east-1:s3" '
        '--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" https://s3.sec.test/bucket/after',
    )
    assert out == "verified\n"
