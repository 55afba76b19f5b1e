"""Build uploads and the host boundary of build requests, on the unit harness (no build runs)."""

from __future__ import annotations

import io
import tarfile

import httpx
import pytest

from corral.runtime.base import Resources
from corral.service.errors import CapacityExceeded
from tests.unit.conftest import Harness


def tar_of(**files: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


async def upload(client: httpx.AsyncClient, data: bytes, kind: str = "context") -> httpx.Response:
    return await client.post("/v1/templates/uploads", params={"kind": kind}, content=data)


async def test_a_context_upload_is_unpacked_privately(
    client: httpx.AsyncClient, harness: Harness
) -> None:
    answer = await upload(client, tar_of(**{"a.txt": b"a", "d/b.txt": b"bb"}))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["kind"] == "context" and body["members"] == 2 and body["id"].startswith("up-")
    root = harness.settings.data_dir / "uploads" / body["id"] / "root"
    assert (root / "d" / "b.txt").read_bytes() == b"bb"
    assert (harness.settings.data_dir / "uploads").stat().st_mode & 0o777 == 0o700


async def test_unsafe_and_oversized_uploads_are_refused(
    client: httpx.AsyncClient, harness: Harness
) -> None:
    bad = await upload(client, tar_of(**{"../x": b"x"}))
    assert bad.status_code == 400 and "'..' is not allowed" in bad.json()["message"]
    harness.settings.build_upload_max_mib = 1
    big = await upload(client, b"\0" * (2 << 20), kind="docker-archive")
    assert big.status_code == 413 and "larger than the limit of 1 MiB" in big.json()["message"]
    assert list((harness.settings.data_dir / "uploads").iterdir()) == []
    kind = await upload(client, b"", kind="tarball")
    assert kind.status_code == 422


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"context_dir": "/etc"}, "reads no host path for a build: upload it instead"),
        ({"base": "docker-archive:/etc/shadow"}, "reads no host path for a build"),
        ({"base": "oci:/var/lib:x"}, "reads no host path for a build"),
        ({"base": "docker-archive:./x.tar"}, "reads no host path for a build"),
        ({"context": "up-nothing"}, "upload 'up-nothing' not found"),
        ({"base": "upload:up-nothing"}, "upload 'up-nothing' not found"),
    ],
)
async def test_build_requests_naming_host_paths_are_refused(
    client: httpx.AsyncClient, body: dict[str, str], message: str
) -> None:
    answer = await client.post("/v1/templates", json={"name": "t", **body})
    assert answer.status_code in (400, 404), answer.text
    assert message in answer.json()["message"]


async def test_a_refused_build_drops_its_uploads_and_kinds_must_match(
    client: httpx.AsyncClient,
) -> None:
    context = (await upload(client, tar_of(**{"a.txt": b"a"}))).json()["id"]
    wrong = await client.post("/v1/templates", json={"name": "t", "base": f"upload:{context}"})
    assert wrong.status_code == 400 and "is a context upload" in wrong.json()["message"]
    again = await client.post("/v1/templates", json={"name": "t", "context": context})
    assert again.status_code == 404  # the refused request took it


async def test_held_build_capacity_counts_until_released(
    client: httpx.AsyncClient, harness: Harness
) -> None:
    admission = harness.workspace.admission
    await admission.hold("build:x", Resources(cpu=1, memory_mib=1024, disk_mib=100), "a build")
    reserved = (await client.get("/v1/capacity")).json()["memory"]["reserved"]
    assert reserved == 1024
    with pytest.raises(CapacityExceeded, match="a build does not fit: not enough free memory"):
        await admission.hold("build:y", Resources(cpu=1, memory_mib=4000, disk_mib=1), "a build")
    admission.unhold("build:x")
    assert (await client.get("/v1/capacity")).json()["memory"]["reserved"] == 0
