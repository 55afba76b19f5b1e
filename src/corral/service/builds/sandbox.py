"""The build sandbox: the gVisor sandbox that runs a build's filesystem steps, booted on first
use over the build's writable overlay root, in the build's network mode.

It boots and is released through the live machinery every sandbox goes through
(``LiveSandboxes.boot_build`` / ``release_resources``): the same admission of boots, slot,
egress attachment and agent link; only its spec differs (a writable root, no record)."""

from __future__ import annotations

import secrets
import string
from pathlib import Path

from corral.network.policy import EgressPolicy, NetworkMode
from corral.runtime.agent_client import AgentClient
from corral.runtime.base import Resources
from corral.service.sandboxes.live import LiveSandboxes

_ID_ALPHABET = string.ascii_lowercase + string.digits


class BuildSandbox:
    """The sandbox that runs a build's filesystem steps, booted on first use; ``close`` releases
    whatever it made (also after a failed boot) and may be called more than once."""

    def __init__(
        self,
        live: LiveSandboxes,
        root: Path,
        resources: Resources,
        network: str = "internet",
    ) -> None:
        self._live = live
        self.network = network
        self.root = root
        self.resources = resources
        self.sandbox_id = "bd-" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))
        self.client: AgentClient | None = None

    async def agent(self) -> AgentClient:
        if self.client is None:
            policy = EgressPolicy(NetworkMode(self.network))
            self.client = await self._live.boot_build(
                self.sandbox_id, self.root, self.resources, policy
            )
        return self.client

    async def close(self) -> None:
        if self.client is not None:
            self.client = None
            await self._live.release_resources(self.sandbox_id, None)
