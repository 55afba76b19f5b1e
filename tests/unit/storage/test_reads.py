"""Template, pin, API key and secret binding records read back exactly as written: the
plain-SQL reads give the same records as the ORM's, for every field, set or left at its default."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.storage import apikeys, templates
from corral.storage.db import Database
from corral.storage.records import (
    ApiKeyRecord,
    SecretBindingRecord,
    TemplatePin,
    TemplateRecord,
)
from corral.storage.tables import ApiKeyRow, TemplateRow


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return Database(tmp_path / "corral.db")


FULL_TEMPLATE = TemplateRecord(
    name="py:3.12",
    image="sha256:" + "ab" * 32,
    cpu=1.5,
    memory_mib=512,
    disk_mib=2048,
    env={"A": "1", "EMPTY": "", "UNICODE": "é\u2603"},
    created_at=1700000000.25,
    source="recipe dev",
    workdir="/srv/app",
    user="app",
    start_cmd=["python3", "-m", "http.server"],
    max_cpu=4.0,
    max_memory_mib=4096,
    max_disk_mib=8192,
    warmup="pip install x",
    warm=True,
    pool=3,
    labels={"team": "x"},
    warm_image="/var/lib/corral/warm/py",
    owner="k-owner",
    shared=False,
)
BARE_TEMPLATE = TemplateRecord(
    name="base", image="base", cpu=1, memory_mib=256, disk_mib=1024, env={}, created_at=1
)


def _orm_template(db: Database, name: str) -> TemplateRecord:
    with db._sessions() as session:
        row = session.get(TemplateRow, name)
        assert row is not None
        return templates._record(row)


@pytest.mark.parametrize("record", [FULL_TEMPLATE, BARE_TEMPLATE], ids=["full", "bare"])
def test_template_reads_match_the_orm(db: Database, record: TemplateRecord) -> None:
    db.templates.put(record)
    read = db.templates.get(record.name)
    assert read == record == _orm_template(db, record.name)
    assert type(read.cpu) is float and type(read.created_at) is float  # type: ignore[union-attr]
    assert db.templates.get("missing") is None


def test_template_list_is_by_name(db: Database) -> None:
    db.templates.put(FULL_TEMPLATE, BARE_TEMPLATE)
    assert db.templates.list() == [BARE_TEMPLATE, FULL_TEMPLATE]


def test_pins_read_back(db: Database) -> None:
    pins = [
        TemplatePin("sb-1", "py:3.12", "sha256:" + "ab" * 32, "/srv/app", "app"),
        TemplatePin("sb-2", "base", "base"),
    ]
    db.templates.pin(*pins)
    assert db.templates.get_pin("sb-1") == pins[0]
    assert db.templates.get_pin("sb-2") == pins[1]
    assert db.templates.get_pin("sb-3") is None
    assert sorted(db.templates.pins(), key=lambda p: p.sandbox_id) == pins


FULL_KEY = ApiKeyRecord(
    id="k-full",
    name="ci é",
    key_hash="f" * 64,
    role="member",
    created_at=1700000000.5,
    scopes=("sandboxes:read", "sandboxes:write"),
    expires_at=1800000000.0,
    revoked_at=1750000000.0,
    quotas={"running": 3.0, "cpu": 2.5},
    rate_limit=12.5,
    created_by="admin",
)
BARE_KEY = ApiKeyRecord(id="k-bare", name="x", key_hash="0" * 64, role="admin", created_at=2)


def _orm_key(db: Database, key_id: str) -> ApiKeyRecord:
    with db._sessions() as session:
        row = session.get(ApiKeyRow, key_id)
        assert row is not None
        return apikeys._record(row)


@pytest.mark.parametrize("record", [FULL_KEY, BARE_KEY], ids=["full", "bare"])
def test_key_reads_match_the_orm(db: Database, record: ApiKeyRecord) -> None:
    db.api_keys.add(record)
    db.api_keys.touch(record.id, 1760000000.25)
    expected = _orm_key(db, record.id)
    assert expected.last_used_at == 1760000000.25
    assert db.api_keys.get(record.id) == expected
    assert db.api_keys.find_by_hash(record.key_hash) == expected
    assert db.api_keys.get("k-missing") is None
    assert db.api_keys.find_by_hash("e" * 64) is None


def test_secret_bindings_read_back_ordered_and_filtered(db: Database) -> None:
    made = [
        SecretBindingRecord("sb-2", "TOKEN", "corral-ph-2", 1700000002.5),
        SecretBindingRecord("sb-1", "TOKEN", "corral-ph-1", 1700000001.25),
        SecretBindingRecord("sb-1", "API", "corral-ph-0", 1),
    ]
    db.secrets.bind(made)
    assert db.secrets.bindings() == [made[2], made[1], made[0]]
    assert db.secrets.bindings("sb-1") == [made[2], made[1]]
    assert db.secrets.bindings("sb-3") == []
    assert type(db.secrets.bindings("sb-1")[0].created_at) is float
