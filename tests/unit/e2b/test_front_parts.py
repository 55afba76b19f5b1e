"""The E2B front's own pieces: addressing, tokens and signatures, the streaming multipart reader."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator

import pytest

from corral.e2b.context import user_of
from corral.e2b.mount import addressed_sandbox
from corral.e2b.multipart import read_parts
from corral.e2b.tokens import AccessTokens, load_secret
from corral.service.errors import InvalidRequest


def test_addressing_by_header_and_host_name() -> None:
    assert addressed_sandbox({b"e2b-sandbox-id": b"sb-1"}) == ("sb-1", 49983)
    assert addressed_sandbox({b"e2b-sandbox-id": b"sb-1", b"e2b-sandbox-port": b"8080"}) == (
        "sb-1",
        8080,
    )
    assert addressed_sandbox({b"e2b-sandbox-id": b"sb-1", b"e2b-sandbox-port": b"x"}) == (
        "sb-1",
        -1,
    )
    assert addressed_sandbox({b"host": b"49983-sb-abc.corral.test"}) == ("sb-abc", 49983)
    assert addressed_sandbox({b"host": b"127.0.0.1:7070"}) is None
    assert addressed_sandbox({}) is None


def test_user_from_basic_auth() -> None:
    value = base64.b64encode(b"nobody:").decode()
    assert user_of({"authorization": f"Basic {value}"}) == "nobody"
    assert user_of({"authorization": "Basic !!!"}) is None
    assert user_of({"authorization": "Bearer x"}) is None
    assert user_of({}) is None


def test_secret_is_private_and_kept(tmp_path) -> None:  # type: ignore[no-untyped-def]
    first = load_secret(tmp_path)
    assert (tmp_path / "e2b.secret").stat().st_mode & 0o777 == 0o600
    assert load_secret(tmp_path) == first
    tokens = AccessTokens(lambda: first)
    assert tokens.check("sb-1", tokens.token("sb-1"))
    assert not tokens.check("sb-2", tokens.token("sb-1"))
    assert not tokens.check("sb-1", None)


def test_signature_matches_the_sdk_format() -> None:
    tokens = AccessTokens(b"k" * 32)
    token = tokens.token("sb-1")
    raw = f"/a:read:user:{token}:123".encode()
    wanted = "v1_" + base64.b64encode(hashlib.sha256(raw).digest()).rstrip(b"=").decode()
    assert tokens.signature("sb-1", "/a", "read", "user", 123) == wanted
    assert not tokens.check_signature(
        "sb-1", wanted, path="/a", operation="read", user="user", expiration=123
    )  # expired long ago
    later = 2**40
    good = tokens.signature("sb-1", "/a", "write", "", later)
    assert tokens.check_signature(
        "sb-1", good, path="/a", operation="write", user="", expiration=later
    )


def multipart(parts: list[tuple[str, bytes]], boundary: str = "XyZ") -> bytes:
    body = b""
    for name, data in parts:
        body += (
            (
                f"--{boundary}\r\n"
                f'Content-Disposition: form-data; name="file"; filename="{name}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n"
            ).encode()
            + data
            + b"\r\n"
        )
    return body + f"--{boundary}--\r\n".encode()


async def chunked(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def test_multipart_streams_each_part_to_its_sink() -> None:
    parts = [("/tmp/a", b"alpha" * 1000), ("/tmp/b", b""), ("/tmp/c", bytes(range(256)) * 50)]
    got: dict[str, bytes] = {}

    async def sink(name: str, data: AsyncIterator[bytes]) -> str:
        got[name] = b"".join([c async for c in data])
        return name

    result = await read_parts(
        "multipart/form-data; boundary=XyZ", chunked(multipart(parts), 97), sink
    )
    assert result == ["/tmp/a", "/tmp/b", "/tmp/c"]
    assert got == dict(parts)


async def test_a_failing_sink_does_not_hang_the_upload() -> None:
    async def sink(name: str, data: AsyncIterator[bytes]) -> None:
        raise InvalidRequest(f"cannot write {name}")

    body = multipart([("/tmp/a", b"x" * 200_000)])
    with pytest.raises(InvalidRequest, match="cannot write /tmp/a"):
        await read_parts("multipart/form-data; boundary=XyZ", chunked(body, 10), sink)


async def test_not_multipart_is_refused() -> None:
    async def sink(name: str, data: AsyncIterator[bytes]) -> None:
        return None

    with pytest.raises(InvalidRequest):
        await read_parts("application/json", chunked(b"{}", 2), sink)


async def test_gunzip_streams_in_bounded_steps() -> None:
    import gzip

    from corral.e2b.files import GUNZIP_STEP, gunzip

    bomb = gzip.compress(b"\0" * (20 << 20))  # 20 MiB of zeros in ~20 KiB
    sizes = [len(c) async for c in gunzip(chunked(bomb, 4096))]
    assert sum(sizes) == 20 << 20
    assert max(sizes) <= GUNZIP_STEP
    with pytest.raises(InvalidRequest, match="not valid gzip"):
        _ = [c async for c in gunzip(chunked(b"not gzip at all", 4))]
    with pytest.raises(InvalidRequest, match="ended before"):
        _ = [c async for c in gunzip(chunked(bomb[: len(bomb) // 2], 4096))]
