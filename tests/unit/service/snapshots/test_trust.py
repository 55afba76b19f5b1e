"""The workspace's signing key and the trust decision over exports."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from corral.service.errors import InvalidRequest, NotFound, StateConflict
from corral.service.snapshots.trust import (
    SELF_NAME,
    SIGNING_CONTEXT,
    TrustService,
    UntrustedExport,
    format_public_key,
    parse_public_key,
)
from corral.storage import Database


@pytest.fixture
def trust(tmp_path: Path) -> TrustService:
    service = TrustService(Database(":memory:"), tmp_path / "signing.key")
    service.start()
    return service


def test_key_is_made_once_with_mode_0600_and_reloaded(trust: TrustService, tmp_path: Path) -> None:
    key_file = tmp_path / "signing.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    again = TrustService(Database(":memory:"), key_file)
    again.start()
    assert again.public_key == trust.public_key
    assert trust.public_key.startswith("ed25519:")


def test_own_signature_verifies_and_tampering_does_not(trust: TrustService) -> None:
    manifest = b'{"files": {}}'
    signature = trust.sign(manifest)
    assert trust.verify(manifest, trust.public_key, signature).name == SELF_NAME
    with pytest.raises(UntrustedExport, match="altered after it was signed"):
        trust.verify(manifest + b" ", trust.public_key, signature)
    with pytest.raises(UntrustedExport, match="not signed"):
        trust.verify(manifest, None, None)
    with pytest.raises(UntrustedExport, match="altered"):
        trust.verify(manifest, trust.public_key, "not base64!")


def test_another_key_is_untrusted_until_added(trust: TrustService) -> None:
    other = Ed25519PrivateKey.generate()
    other_public = format_public_key(other.public_key())
    manifest = b"manifest"
    signature = other.sign(SIGNING_CONTEXT + manifest)
    encoded = base64.b64encode(signature).decode()
    with pytest.raises(UntrustedExport, match="does not trust"):
        trust.verify(manifest, other_public, encoded)
    pem = (
        other.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    added = trust.add("peer", pem)
    assert added.public_key == other_public
    assert trust.verify(manifest, other_public, encoded).name == "peer"
    # A signature over the bare manifest (no context) is not an export signature.
    bare = base64.b64encode(other.sign(manifest)).decode()
    with pytest.raises(UntrustedExport):
        trust.verify(manifest, other_public, bare)
    with pytest.raises(StateConflict):
        trust.add("again", other_public)
    trust.remove("peer")
    with pytest.raises(UntrustedExport, match="does not trust"):
        trust.verify(manifest, other_public, encoded)
    with pytest.raises(NotFound):
        trust.remove("peer")


@pytest.mark.parametrize("bad", ["ed25519:AAAA", "hello", "ed25519:" + "A" * 5000, ""])
def test_malformed_public_keys_are_refused(bad: str) -> None:
    with pytest.raises(InvalidRequest):
        parse_public_key(bad)


def test_names_are_checked(trust: TrustService) -> None:
    key = format_public_key(Ed25519PrivateKey.generate().public_key())
    for name in ("../x", "", SELF_NAME, "a" * 65):
        with pytest.raises(InvalidRequest):
            trust.add(name, key)
    with pytest.raises(InvalidRequest, match="own key"):
        trust.add("me", trust.public_key)
