"""`Template.with_recipe` names recipes for the daemon to apply (before every other step)."""

from __future__ import annotations

from corral.sdk.templates import Template


def test_with_recipe_asks_the_daemon_for_each_recipe_once() -> None:
    spec = Template().from_image("base").with_recipe("dev").with_recipe("code-interpreter")
    body = spec.with_recipe("dev").run_cmd("echo mine").body("dev")
    assert body["recipes"] == ["dev", "code-interpreter"]
    assert [step["value"] for step in body["steps"]] == ["echo mine"]
