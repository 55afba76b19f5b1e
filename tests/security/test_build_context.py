"""Attacks on the host boundary of template builds: an API caller tries to make the daemon (root)
read host files into a template, through ``context_dir``, COPY sources, image source paths and
uploaded archives whose members or links point outside. Every attempt must be refused and no
canary content may reach a template, a response or the daemon's dirs outside the upload.

The daemon is a real one (``tests/e2e/conftest.start_daemon``) with its own data dir, network
prefix and subnet, and an import dir the test owns; it is stopped by pid at the end.
"""

from __future__ import annotations

import base64
import io
import json
import secrets
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Daemon, running_daemon
from tests.e2e.images import write_docker_archive

pytestmark = pytest.mark.e2e

Result = tuple[int, Any]


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Host files an attacker wants: a canary secret, and an archive outside the import dir."""
    root = tmp_path_factory.mktemp("host")
    secret = root / "secret.txt"
    secret.write_text(f"CANARY-{secrets.token_hex(8)}\n")
    imports = root / "imports"
    imports.mkdir()
    (root / "outside").mkdir()
    outside = write_docker_archive(root / "outside" / "busybox.tar")
    shutil.copy(outside, imports / "busybox.tar")
    (imports / "escape.tar").symlink_to(outside)
    (imports / "shadow").symlink_to("/etc/shadow")
    return {"root": root, "secret": secret, "imports": imports, "outside": outside}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, host: dict[str, Path]) -> Iterator[Daemon]:
    prefix = "cs" + secrets.token_hex(2)
    data_dir = tmp_path_factory.mktemp("daemon-bctx") / "data"
    env = {"CORRAL_IMPORT_DIR": str(host["imports"])}
    with running_daemon(data_dir, prefix, extra_env=env) as daemon:
        yield daemon


@pytest.fixture
def api(daemon: Daemon) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=daemon.url, headers={"Authorization": f"Bearer {daemon.key}"}, timeout=300
    ) as client:
        yield client


def build(api: httpx.Client, body: dict[str, Any]) -> Result:
    """(status, error body) of a refused request, or (200, the build's events)."""
    with api.stream("POST", "/v1/templates", json=body) as response:
        if response.status_code != 200:
            response.read()
            return response.status_code, response.json()
        return 200, [json.loads(line) for line in response.iter_lines() if line]


def upload(api: httpx.Client, data: bytes, kind: str = "context") -> httpx.Response:
    return api.post(
        "/v1/templates/uploads",
        params={"kind": kind},
        content=data,
        headers={"Content-Type": "application/x-tar"},
    )


def tar_of(*members: tuple[str, bytes, str, bytes | None]) -> bytes:
    """A tar of (name, type, linkname, data) members, written exactly as given."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, kind, link, data in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = link
            info.mode = 0o644
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


BENIGN = tar_of(("hello.txt", tarfile.REGTYPE, "", b"hello\n"))


def grep_template(api: httpx.Client, template: str, needle: str) -> str:
    """The files of a sandbox of ``template`` that hold ``needle`` (its root file system only:
    not /proc or /dev, whose files never end)."""
    search = "find / -xdev -type f 2>/dev/null | xargs grep -l"
    made = api.post("/v1/sandboxes", json={"template": template})
    assert made.status_code == 201, made.text
    sandbox = made.json()["id"]
    try:
        with api.stream(
            "POST",
            f"/v1/sandboxes/{sandbox}/exec",
            json={"cmd": ["sh", "-c", f"{search} '{needle}' 2>/dev/null; true"]},
        ) as response:
            events = [json.loads(line) for line in response.iter_lines() if line]
        out = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "stdout")
        return out.decode(errors="replace")
    finally:
        api.delete(f"/v1/sandboxes/{sandbox}")


def refusal(api: httpx.Client, name: str, result: Result, canary: str) -> str:
    """The refusal's message; fails (saying what leaked) if the build made a template."""
    status, payload = result
    if status == 200 and payload[-1]["type"] == "done":
        found = grep_template(api, name, canary)
        api.delete(f"/v1/templates/{name}")
        pytest.fail(f"the build of {name} was accepted; canary search in it: {found!r}")
    message = payload["message"] if status != 200 else payload[-1]["error"]
    assert canary not in json.dumps(payload)
    names = [t["name"] for t in api.get("/v1/templates").json()["templates"]]
    assert name not in names
    return str(message)


def canary_of(host: dict[str, Path]) -> str:
    return host["secret"].read_text().strip()


@pytest.mark.parametrize("where", ["canary-dir", "etc"])
def test_context_dir_naming_a_host_dir_is_refused(
    api: httpx.Client, host: dict[str, Path], where: str
) -> None:
    context, src = (
        (str(host["root"]), "secret.txt") if where == "canary-dir" else ("/etc", "shadow")
    )
    body = {
        "name": "steal-ctx",
        "dockerfile": f"FROM base\nCOPY {src} /stolen\n",
        "context_dir": context,
    }
    message = refusal(api, "steal-ctx", build(api, body), canary_of(host))
    assert "reads no host path for a build: upload it instead" in message


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("{secret}", "does not exist in the build context"),
        ("/etc/shadow", "does not exist in the build context"),
        ("../../../../../../{secret}", "climbs out of the build context"),
        ("../../etc/shadow", "climbs out of the build context"),
    ],
    ids=["abs-canary", "abs-shadow", "dotdot-canary", "dotdot-shadow"],
)
@pytest.mark.parametrize("form", ["steps", "dockerfile"])
def test_copy_of_host_paths_reads_nothing(
    api: httpx.Client, host: dict[str, Path], src: str, expected: str, form: str
) -> None:
    source = src.format(secret=str(host["secret"]).lstrip("/"))
    if src == "{secret}":
        source = str(host["secret"])
    uploaded = upload(api, BENIGN)
    assert uploaded.status_code == 200, uploaded.text
    body: dict[str, Any] = {"name": "steal-copy", "context": uploaded.json()["id"]}
    if form == "steps":
        body["steps"] = [{"kind": "copy", "value": {"src": [source], "dst": "/stolen"}}]
    else:
        body["dockerfile"] = f"FROM base\nCOPY {source} /stolen\n"
    message = refusal(api, "steal-copy", build(api, body), canary_of(host))
    assert expected in message


def test_copy_without_a_context_reads_no_host_path(
    api: httpx.Client, host: dict[str, Path]
) -> None:
    body = {
        "name": "steal-noctx",
        "steps": [{"kind": "copy", "value": {"src": [str(host["secret"])], "dst": "/stolen"}}],
    }
    message = refusal(api, "steal-noctx", build(api, body), canary_of(host))
    assert "needs a build context: upload one" in message


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("docker-archive:{outside}", "reads no host path for a build: upload it instead"),
        ("docker-archive:{imports}/escape.tar", "is not inside the import dir"),
        ("docker-archive:{imports}/shadow", "is not inside the import dir"),
        ("docker-archive:{imports}/../outside/busybox.tar", "is not inside the import dir"),
        ("docker-archive:/etc/shadow", "is not inside the import dir"),
        ("oci:/etc:latest", "is not inside the import dir"),
        ("docker-archive:busybox.tar", "reads no host path for a build"),
    ],
    ids=["outside", "symlink-out", "symlink-shadow", "dotdot", "shadow", "oci-etc", "relative"],
)
def test_image_host_paths_only_inside_the_import_dir(
    api: httpx.Client, host: dict[str, Path], base: str, expected: str
) -> None:
    text = base.format(outside=host["outside"], imports=host["imports"])
    message = refusal(
        api, "steal-img", build(api, {"name": "steal-img", "base": text}), canary_of(host)
    )
    assert expected in message
    assert "upload it instead" in message


def test_an_archive_inside_the_import_dir_is_imported(
    api: httpx.Client, host: dict[str, Path]
) -> None:
    status, events = build(
        api, {"name": "imported", "base": f"docker-archive:{host['imports']}/busybox.tar"}
    )
    assert status == 200 and events[-1]["type"] == "done", events
    try:
        assert grep_template(api, "imported", canary_of(host)) == ""
    finally:
        api.delete("/v1/templates/imported")


@pytest.mark.parametrize(
    ("members", "expected"),
    [
        ([("../planted.txt", tarfile.REGTYPE, "", b"x")], "'..' is not allowed"),
        ([("a/../../planted.txt", tarfile.REGTYPE, "", b"x")], "'..' is not allowed"),
        ([("{root}/planted.txt", tarfile.REGTYPE, "", b"x")], "absolute names are not allowed"),
        ([("leak", tarfile.SYMTYPE, "{secret}", None)], "symlink to the absolute path"),
        ([("leak", tarfile.SYMTYPE, "../../../../../../{secret}", None)], "outside the context"),
        ([("leak", tarfile.LNKTYPE, "{secret}", None)], "absolute names are not allowed"),
        ([("leak", tarfile.LNKTYPE, "../../../{secret}", None)], "'..' is not allowed"),
        ([("leak", tarfile.LNKTYPE, "not-in-archive", None)], "not a file of this archive"),
        ([("tty", tarfile.CHRTYPE, "", None)], "is a device file"),
        (
            [
                ("d", tarfile.SYMTYPE, ".", None),
                ("up", tarfile.SYMTYPE, "d", None),
                ("up/planted.txt", tarfile.REGTYPE, "", b"x"),
            ],
            "is not a directory",
        ),
    ],
    ids=[
        "dotdot",
        "nested-dotdot",
        "absolute",
        "symlink-abs",
        "symlink-dotdot",
        "hardlink-abs",
        "hardlink-dotdot",
        "hardlink-unknown",
        "device",
        "through-symlink",
    ],
)
@pytest.mark.parametrize("kind", ["context", "oci"])
def test_unsafe_uploads_are_refused(
    api: httpx.Client,
    daemon: Daemon,
    host: dict[str, Path],
    members: list[tuple[str, bytes, str, bytes | None]],
    expected: str,
    kind: str,
) -> None:
    secret = str(host["secret"]).lstrip("/")
    given = [
        (
            name.format(root=host["root"]),
            kind_,
            link.format(secret=secret if not link.startswith("{") else host["secret"]),
            data,
        )
        for name, kind_, link, data in members
    ]
    answer = upload(api, tar_of(*given), kind)
    assert answer.status_code == 400, answer.text
    assert f"refusing the {kind} upload" in answer.json()["message"]
    assert expected in answer.json()["message"]
    assert canary_of(host) not in answer.text
    assert not (host["root"] / "planted.txt").exists()
    assert list((daemon.data_dir / "uploads").iterdir()) == []  # nothing of it is kept


def test_copy_through_a_symlink_to_a_host_path_is_not_possible(
    api: httpx.Client, host: dict[str, Path]
) -> None:
    """A context whose symlink leads to the canary cannot even be uploaded; a context with a
    symlink inside it copies what it points to inside the context only."""
    leak = tar_of(("leak", tarfile.SYMTYPE, str(host["secret"]), None))
    assert upload(api, leak).status_code == 400
    inner = tar_of(
        ("real.txt", tarfile.REGTYPE, "", b"inside\n"),
        ("link.txt", tarfile.SYMTYPE, "real.txt", None),
    )
    uploaded = upload(api, inner)
    assert uploaded.status_code == 200, uploaded.text
    status, events = build(
        api,
        {
            "name": "inner-link",
            "context": uploaded.json()["id"],
            "dockerfile": "FROM base\nCOPY link.txt /copied.txt\n",
        },
    )
    assert status == 200 and events[-1]["type"] == "done", events
    try:
        made = api.post("/v1/sandboxes", json={"template": "inner-link"})
        sandbox = made.json()["id"]
        try:
            read = api.get(f"/v1/sandboxes/{sandbox}/files/content", params={"path": "/copied.txt"})
            assert read.content == b"inside\n"
        finally:
            api.delete(f"/v1/sandboxes/{sandbox}")
    finally:
        api.delete("/v1/templates/inner-link")


def test_uploads_are_bounded_and_used_once(api: httpx.Client, host: dict[str, Path]) -> None:
    uploaded = upload(api, BENIGN)
    upload_id = uploaded.json()["id"]
    body = {"name": "once", "context": upload_id, "dockerfile": "FROM base\nCOPY hello.txt /\n"}
    status, events = build(api, body)
    assert status == 200 and events[-1]["type"] == "done", events
    api.delete("/v1/templates/once")
    again = build(api, {**body, "name": "twice"})
    assert again[0] == 404 and "upload it again" in again[1]["message"]
