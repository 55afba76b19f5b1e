"""`sandbox.network`: read and change a sandbox's egress policy while it runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from corral.sdk.models import NetworkChange, NetworkPolicy

if TYPE_CHECKING:
    from corral.sdk.sandbox import AsyncSandbox

__all__ = ["AsyncNetwork"]


class AsyncNetwork:
    """The egress of one sandbox (docs/network.md)."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    async def get(self) -> NetworkPolicy:
        info = await self._sandbox.info()
        return info.network or NetworkPolicy(mode="airgapped")

    async def update(
        self,
        mode: str | None = None,
        *,
        allow: Sequence[str] | None = None,
        deny: Sequence[str] | None = None,
    ) -> NetworkChange:
        """Change the policy at once (a parked sandbox gets it when it wakes). Each of `mode`,
        `allow`, `deny` given replaces that part; those left None stay as they are, so
        `update(allow=[])` removes every allow rule. Connections the new policy forbids are cut."""
        body: dict[str, Any] = {}
        if mode is not None:
            body["mode"] = mode
        if allow is not None:
            body["allow"] = list(allow)
        if deny is not None:
            body["deny"] = list(deny)
        answer = await self._sandbox.session.json(
            "PUT", f"{self._sandbox.path}/network", json_body=body
        )
        return NetworkChange.from_wire(answer)
