"""The secret store: values sealed at rest and never answered; presets; bindings; what the broker
sees after a rotation, a revocation, a removal; placeholders and files for a new sandbox."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from corral.network.broker import CertificateAuthority
from corral.service.errors import InvalidRequest, NotFound
from corral.service.secrets import PLACEHOLDER_PREFIX, TRUST_ENV, SecretService
from corral.storage import Database
from corral.storage.sealing import Sealer, SealError

VALUE = "ghp_realvalue0123456789"


@pytest.fixture
def service(tmp_path: Path) -> SecretService:
    db = Database(tmp_path / "corral.db")
    return SecretService(db, Sealer(tmp_path / "secrets.key"), CertificateAuthority(tmp_path / "b"))


def test_value_is_sealed_at_rest_with_a_private_key(service: SecretService, tmp_path: Path) -> None:
    record = service.set("GITHUB_TOKEN", VALUE, preset="github")
    assert record.hosts == ["github.com", "api.github.com", "uploads.github.com"]
    assert VALUE not in repr(record)
    assert VALUE.encode() not in (tmp_path / "corral.db").read_bytes()
    for wal in tmp_path.glob("corral.db*"):
        assert VALUE.encode() not in wal.read_bytes()
    key = tmp_path / "secrets.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert len(key.read_bytes()) == 32
    # The name is the associated data: a sealed value moved under another name does not open.
    with pytest.raises(SealError):
        service.sealer.open("OTHER", record.sealed)


def test_presets_and_their_checks(service: SecretService) -> None:
    openai = service.set("OPENAI_API_KEY", "sk-1", preset="openai")
    assert (openai.hosts, openai.options["header"], openai.options["scheme"]) == (
        ["api.openai.com"],
        "authorization",
        "Bearer",
    )
    anthropic = service.set("ANTHROPIC_API_KEY", "sk-ant-1", preset="anthropic")
    assert anthropic.options["header"] == "x-api-key"
    with pytest.raises(InvalidRequest, match="needs the hosts"):
        service.set("API", "v", preset="http")
    with pytest.raises(InvalidRequest, match="is not a host name"):
        service.set("API", "v", preset="http", hosts=["a..b"])
    with pytest.raises(InvalidRequest, match="unknown secret preset"):
        service.set("API", "v", preset="nope")
    with pytest.raises(InvalidRequest, match="ACCESS_KEY_ID:SECRET_ACCESS_KEY"):
        service.set("AWS", "nocolon", preset="aws")
    with pytest.raises(InvalidRequest, match="printable ASCII"):
        service.set("API", "line\r\nInjected: 1", preset="http", hosts=["x.test"])
    with pytest.raises(InvalidRequest, match="not valid"):
        service.set("1BAD", "v", preset="http", hosts=["x.test"])


def test_broker_sees_rotation_revocation_and_removal_at_once(service: SecretService) -> None:
    service.set("API", "first", preset="http", hosts=["api.test"], header="x-key")
    setup = service.prepare(["API"], {})
    placeholder = setup.env["API"]
    assert placeholder.startswith(PLACEHOLDER_PREFIX) and "first" not in placeholder
    assert {k: setup.env[k] for k in TRUST_ENV} == TRUST_ENV
    service.bind("sb-one", setup.placeholders)
    (inj,) = service.injections("sb-one")
    assert (inj.value, inj.placeholder, inj.header) == (b"first", placeholder.encode(), "x-key")
    assert inj.covers("api.test") and not inj.covers("evil.test")

    service.rotate("API", "second")
    assert service.injections("sb-one")[0].value == b"second"

    service.inherit("sb-fork", "sb-one")
    assert service.injections("sb-fork")[0].placeholder == placeholder.encode()
    service.inherit("snapshot:snap", "sb-one")  # a memory snapshot holds them too, unlisted
    assert service.bound_sandboxes("API") == ["sb-fork", "sb-one"]

    service.revoke("sb-one", "API")
    assert service.injections("sb-one") == ()
    assert service.injections("sb-fork")  # the fork keeps its own binding

    service.remove("API")
    assert service.injections("sb-fork") == ()
    with pytest.raises(NotFound):
        service.get("API")


def test_files_from_templates_hold_placeholders(service: SecretService) -> None:
    service.set("GITHUB_TOKEN", VALUE, preset="github")
    setup = service.prepare(
        ["GITHUB_TOKEN"],
        {
            "/root/.config/gh/hosts.yml": ("GITHUB_TOKEN", None),
            "/run/token": ("GITHUB_TOKEN", None),
            "/root/.git-credentials": ("GITHUB_TOKEN", None),
            "/etc/app.ini": ("GITHUB_TOKEN", "token = ${GITHUB_TOKEN}\n"),
        },
    )
    placeholder = setup.placeholders["GITHUB_TOKEN"]
    assert setup.files["/root/.config/gh/hosts.yml"] == (
        f"github.com:\n    oauth_token: {placeholder}\n    git_protocol: https\n"
    )
    assert setup.files["/run/token"] == placeholder + "\n"
    assert setup.files["/root/.git-credentials"] == (
        f"https://x-access-token:{placeholder}@github.com\n"
    )
    assert setup.files["/etc/app.ini"] == f"token = {placeholder}\n"
    assert all(VALUE not in text for text in setup.files.values())
    with pytest.raises(InvalidRequest, match="not a given secret"):
        service.prepare(["GITHUB_TOKEN"], {"/x": ("GITHUB_TOKEN", "$OTHER")})
    with pytest.raises(InvalidRequest, match="not found"):
        service.prepare(["MISSING"], {})


def test_aws_gets_two_placeholder_keys(service: SecretService) -> None:
    service.set("AWS", "AKIDREAL:secretreal", preset="aws")
    setup = service.prepare(["AWS"], {})
    assert setup.env["AWS_ACCESS_KEY_ID"].startswith(PLACEHOLDER_PREFIX)
    assert setup.env["AWS_SECRET_ACCESS_KEY"].startswith(PLACEHOLDER_PREFIX)
    service.bind("sb-a", setup.placeholders)
    (inj,) = service.injections("sb-a")
    assert (inj.aws_key_id, inj.value) == (b"AKIDREAL", b"secretreal")
    assert inj.placeholder == setup.env["AWS_ACCESS_KEY_ID"].encode()
    service.set("AWS2", "AKIDOTHER:secret2", preset="aws")
    with pytest.raises(InvalidRequest, match="at most one aws secret"):
        service.prepare(["AWS", "AWS2"], {})
    service.set("SSL_CERT_FILE", "v", preset="http", hosts=["x.test"])
    with pytest.raises(InvalidRequest, match="trust settings use that env name"):
        service.prepare(["SSL_CERT_FILE"], {})


async def test_audit_is_flushed_and_marks_last_use(service: SecretService) -> None:
    service.set("API", "v", preset="http", hosts=["api.test"])
    service.used("sb-one", "API", "api.test", "GET", "/user")
    entries = service.audit_log(secret="API")
    assert [(e.sandbox_id, e.host, e.method, e.path) for e in entries] == [
        ("sb-one", "api.test", "GET", "/user")
    ]
    assert service.get("API").last_used_at is not None


def test_ca_key_is_private_and_stable(service: SecretService, tmp_path: Path) -> None:
    pem = service.authority.certificate_pem()
    assert stat.S_IMODE((tmp_path / "b" / "ca.key").stat().st_mode) == 0o600
    assert b"PRIVATE" not in pem
    assert CertificateAuthority(tmp_path / "b").certificate_pem() == pem
