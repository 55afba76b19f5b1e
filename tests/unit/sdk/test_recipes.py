"""Recipes are plain RUN steps a user can read: ``--with dev`` adds them before ``--run``."""

from __future__ import annotations

import pytest

from corral.sdk.recipes import RECIPES, recipe_steps
from corral.sdk.templates import Template


def test_dev_adds_its_run_steps_before_the_users_own() -> None:
    body = Template().from_image("base").with_recipe("dev").run_cmd("echo mine").body("dev")
    runs = [step["value"] for step in body["steps"] if step["kind"] == "run"]
    assert runs == [*RECIPES["dev"], "echo mine"]
    joined = " ".join(RECIPES["dev"])
    for tool in ("git", "build-essential", "nodejs", "@anthropic-ai/claude-code", "@openai/codex"):
        assert tool in joined
    assert (
        RECIPES["dev"][-1]
        == "git --version && node --version && claude --version && codex --version"
    )


def test_an_unknown_recipe_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown recipe 'gpu': known are dev"):
        recipe_steps("gpu")
    assert recipe_steps(" DEV ") == RECIPES["dev"]
