"""The `dev` recipe end to end: a real build from the package registries (apt, PyPI, npm, with the
host's own mirror and CA settings), then the tools a coding agent expects run in a sandbox."""

from __future__ import annotations

import pytest

from corral import Client, Sandbox
from tests.e2e.conftest import BackgroundBuilds, Daemon

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def daemon(builds: BackgroundBuilds) -> Daemon:
    """The daemon the `dev` template was built in (in the background, from the session's start)."""
    return builds.daemon


def test_dev_recipe_gives_git_compilers_node_and_the_agent_clis(
    daemon: Daemon, dev_template: str
) -> None:
    client = Client(url=daemon.url, api_key=daemon.key)
    listed = {r["name"]: r for r in client.recipes()}
    assert "claude" in listed["dev"]["description"]
    with Sandbox.create(template=dev_template, url=daemon.url, api_key=daemon.key) as sbx:
        probe = sbx.exec(
            "git --version && node --version && npm --version && cc --version | head -1"
            " && make --version | head -1 && claude --version && codex --version"
            " && test ! -e /etc/corral-build"  # the build's CA copy is gone from the image
        )
        assert probe.exit_code == 0, probe.stderr
        lines = probe.stdout.splitlines()
        assert lines[0].startswith("git version") and lines[1].startswith("v24.")
        assert "(Claude Code)" in lines[5] and lines[6].startswith("codex-cli")
