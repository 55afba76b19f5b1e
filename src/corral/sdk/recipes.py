"""Recipes: named, readable lists of build steps for common template environments.

A recipe is nothing but RUN steps a user could have typed (``corral template create NAME
--with dev`` is ``--run`` with each of them, before the user's own ``--run`` steps); they fetch
from the package registries the build's network mode reaches (``internet`` by default), with the
image's own package managers and their default configuration. docs/network.md lists them.

- ``dev``: what coding agents expect on a machine: git, a C toolchain, make, Node.js and npm
  (Debian's), ripgrep, jq, unzip, openssh-client, python3-pip and venv; then the coding-agent
  CLIs from npm (``claude``: @anthropic-ai/claude-code, ``codex``: @openai/codex); the last step
  checks that ``git``, ``node``, ``claude`` and ``codex`` run. For Debian-based images.
"""

from __future__ import annotations

__all__ = ["RECIPES", "recipe_steps"]

_APT = "DEBIAN_FRONTEND=noninteractive apt-get"

RECIPES: dict[str, tuple[str, ...]] = {
    "dev": (
        f"{_APT} update && {_APT} install -y --no-install-recommends git build-essential make"
        " ca-certificates curl openssh-client nodejs npm ripgrep jq unzip less procps"
        " python3-pip python3-venv",
        "npm install -g --no-fund --no-audit @anthropic-ai/claude-code @openai/codex",
        "apt-get clean && rm -rf /var/lib/apt/lists/* /root/.npm",
        "git --version && node --version && claude --version && codex --version",
    ),
}


def recipe_steps(name: str) -> tuple[str, ...]:
    """The RUN steps of recipe ``name``; ValueError naming the known ones otherwise."""
    steps = RECIPES.get(name.strip().lower())
    if steps is None:
        raise ValueError(f"unknown recipe {name!r}: known are {', '.join(sorted(RECIPES))}")
    return steps
