"""Create: how a new sandbox is made for a caller, cheapest first. A sandbox of the template's
ready pool when one fits the request (``pools.py``), else a restore of the template's warm
memory image, else a cold boot (both ``launch.py``)."""

from __future__ import annotations

from corral.service.launch import Launcher
from corral.service.model import CreateRequest
from corral.service.pools import PoolService
from corral.storage import SandboxRecord

__all__ = ["SandboxCreator"]


class SandboxCreator:
    """Makes the sandboxes callers ask for: pool, then warm, then cold."""

    def __init__(self, launcher: Launcher, pools: PoolService) -> None:
        self.launcher = launcher
        self.pools = pools

    async def create(self, request: CreateRequest) -> SandboxRecord:
        claimed = await self.pools.claim(request)
        if claimed is not None:
            return claimed
        return await self.launcher.create(request)
