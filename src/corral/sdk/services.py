"""`client.services`: the project's services, names every sandbox resolves (admin)."""

from __future__ import annotations

import builtins
from typing import Any
from urllib.parse import quote

from corral.sdk._http import HTTPSession
from corral.sdk.models import ProjectServiceInfo

__all__ = ["AsyncServices"]


class AsyncServices:
    """The project's services (docs/network.md, "Project services"): add, list, remove."""

    def __init__(self, session: HTTPSession) -> None:
        self._session = session

    async def add(
        self,
        name: str,
        target: str | None = None,
        *,
        sandbox: str | None = None,
        port: int | None = None,
    ) -> ProjectServiceInfo:
        """Add (or replace) service `name` at `target` (`IPV4:PORT`), or, with `sandbox` and
        `port`, as that port of that sandbox (other sandboxes then reach `name:port`)."""
        body: dict[str, Any] = {"target": target}
        if sandbox is not None or port is not None:
            body = {"sandbox_id": sandbox, "port": port}
        answer = await self._session.json(
            "PUT", f"/v1/services/{quote(name, safe='')}", json_body=body
        )
        return ProjectServiceInfo.from_wire(answer)

    async def list(self) -> builtins.list[ProjectServiceInfo]:
        answer = await self._session.json("GET", "/v1/services")
        return [ProjectServiceInfo.from_wire(item) for item in answer.get("services", [])]

    async def remove(self, name: str) -> None:
        await self._session.request("DELETE", f"/v1/services/{quote(name, safe='')}")
