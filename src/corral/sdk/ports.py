"""`sandbox.ports`: open a sandbox's port to inbound HTTP and WebSocket clients, list, close."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

from corral.sdk.models import PortInfo

if TYPE_CHECKING:
    from corral.sdk.sandbox import AsyncSandbox

__all__ = ["AsyncPorts"]


class AsyncPorts:
    """The open ports of one sandbox (docs/network.md, "Inbound ports")."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    async def open(self, port: int, *, public: bool = False) -> PortInfo:
        """Open `port` (a server listening on 0.0.0.0:PORT in the sandbox) through the daemon.
        The answer's `url` reaches it; send `token` as the `X-Corral-Token` header (or the
        `corral_token` query parameter) unless `public`. Opening an open port again keeps its
        token and sets `public`."""
        answer = await self._sandbox.session.json(
            "POST", f"{self._sandbox.path}/ports", json_body={"port": port, "public": public}
        )
        return PortInfo.from_wire(answer)

    async def list(self) -> builtins.list[PortInfo]:
        answer = await self._sandbox.session.json("GET", f"{self._sandbox.path}/ports")
        return [PortInfo.from_wire(item) for item in answer.get("ports", [])]

    async def close(self, port: int) -> None:
        await self._sandbox.session.request("DELETE", f"{self._sandbox.path}/ports/{int(port)}")
