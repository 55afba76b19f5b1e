"""The fake internet of the networking tests, and a daemon whose sandboxes' egress leads to it.

``internet`` is a lab of ``hostlab.py`` on 198.18.0.0/24: WEB 198.18.0.2 and OTHER 198.18.0.3
(HTTP, each answering ``page(its address)``), a TCP echo on WEB:9000, DNS on 198.18.0.53 for
web.fake.test and other.fake.test, reached through a veth of its own (OUR_SIDE is our end) and
one route -- never a default route. ``netd`` is a daemon that forwards DNS to the fake resolver
and lets internet egress leave by the lab's veth. Everything is removed at the end, also on
failure.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from corral import Sandbox
from tests.e2e.conftest import Daemon, running_daemon
from tests.e2e.hostlab import HostLab, daemon_env, host_lab, page

NET = "198.18.0"
WEB, OTHER, DNS = f"{NET}.2", f"{NET}.3", f"{NET}.53"
OUR_SIDE = f"{NET}.249"
MODES = "project_internet,internet,airgapped"  # "project" is not allowed in this workspace
ZONE = {"web.fake.test": WEB, "other.fake.test": OTHER}

__all__ = ["DNS", "MODES", "OTHER", "OUR_SIDE", "WEB", "HostLab", "fetch", "page", "resolves"]


@pytest.fixture(scope="module")
def internet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostLab]:
    with host_lab(tmp_path_factory.mktemp("internet"), NET, ZONE) as lab:
        yield lab


@pytest.fixture(scope="module")
def netd(tmp_path_factory: pytest.TempPathFactory, internet: HostLab) -> Iterator[Daemon]:
    data_dir = tmp_path_factory.mktemp("netd") / "data"
    prefix = "cn" + secrets.token_hex(2)
    with running_daemon(data_dir, prefix, extra_env=daemon_env(internet, MODES)) as daemon:
        yield daemon


def fetch(sbx: Sandbox, url: str) -> str | None:
    """The body curl got from ``url`` inside the sandbox, or None if it could not connect."""
    result = sbx.exec(["curl", "-sS", "--max-time", "4", url])
    return result.stdout if result.exit_code == 0 else None


def resolves(sbx: Sandbox, name: str) -> bool:
    return sbx.exec(["getent", "hosts", name]).exit_code == 0
