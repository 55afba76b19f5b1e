"""The build sandbox: the gVisor sandbox that runs a build's filesystem steps, booted on first
use over the build's writable overlay root, in the build's network mode."""

from __future__ import annotations

import contextlib
import logging
import secrets
import string
from pathlib import Path
from typing import TYPE_CHECKING

from corral.images.cas import ImageConfig
from corral.network.base import Slot
from corral.network.policy import EgressPolicy, NetworkMode
from corral.network.sandbox_net import write_resolv_conf
from corral.runtime.agent_client import AgentClient
from corral.runtime.base import AgentMount, Resources, SandboxSpec
from corral.service.agent_keys import new_agent_key

if TYPE_CHECKING:
    from corral.service.builds.builder import TemplateBuilder

log = logging.getLogger("corral.builds")

_ID_ALPHABET = string.ascii_lowercase + string.digits


class BuildSandbox:
    """The sandbox that runs a build's filesystem steps, booted on first use."""

    def __init__(
        self,
        builder: TemplateBuilder,
        root: Path,
        config: ImageConfig,
        resources: Resources,
        network: str = "internet",
    ) -> None:
        self._b = builder
        self.network = network
        self.root = root
        self.config = config
        self.resources = resources
        self.sandbox_id = "bd-" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))
        self.slot: Slot | None = None
        self.client: AgentClient | None = None
        self.started = False
        self.egress = False

    async def agent(self) -> AgentClient:
        if self.client is not None:
            return self.client
        b = self._b
        self.slot = await b.network.lease()
        await b.network.prepare(self.slot)
        self.egress = True
        await b.egress.attach(self.sandbox_id, self.slot, EgressPolicy(NetworkMode(self.network)))
        mount = b.agent_mount
        key = new_agent_key()
        spec = SandboxSpec(
            sandbox_id=self.sandbox_id,
            rootfs=self.root,
            resources=self.resources,
            agent=AgentMount(mounts=mount.mounts, argv=mount.argv, env=mount.env),
            netns_path=self.slot.netns_path,
            annotations={"corral.build": "1"},
            writable_root=True,
            agent_key=key,
            resolv_conf=write_resolv_conf(b.settings.data_dir / "network"),
        )
        self.started = True
        await b.runtime.start(spec)
        client = b.connect_agent(self.sandbox_id, self.slot)
        client.set_key(key)  # kept in memory only: a build sandbox is never restored
        self.client = client
        await client.wait_ready(b.settings.agent_ready_timeout)
        return client

    async def close(self) -> None:
        b = self._b
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.aclose()
            self.client = None
        if self.started:
            try:
                await b.runtime.destroy(self.sandbox_id)
            except Exception as exc:
                log.error("build sandbox %s: destroying it failed: %s", self.sandbox_id, exc)
            self.started = False
        if self.egress:
            try:
                await b.egress.detach(self.sandbox_id)
            except Exception as exc:
                log.error("build sandbox %s: stopping its egress failed: %s", self.sandbox_id, exc)
            self.egress = False
        if self.slot is not None:
            with contextlib.suppress(Exception):
                await b.network.release(self.slot)
            self.slot = None
