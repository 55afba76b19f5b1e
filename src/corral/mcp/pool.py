"""The sandboxes one MCP session uses, through the SDK's `AsyncClient`."""

from __future__ import annotations

import logging
from typing import Any

import anyio

from corral.sdk import AsyncClient, AsyncSandbox, CorralError

__all__ = ["SandboxPool"]

log = logging.getLogger(__name__)


class SandboxPool:
    """The sandboxes one MCP server session uses.

    Invariant: `created` holds exactly the sandboxes this pool made and has not killed; the
    default sandbox, once made, is one of them. A lock keeps concurrent first calls from
    making two default sandboxes. With `kill_on_close` (stdio: the session is the process)
    `close` kills what the pool made; otherwise (HTTP sessions) those sandboxes live on until
    their TTL or a `kill_sandbox`.
    """

    def __init__(
        self,
        client: AsyncClient,
        template: str = "base",
        *,
        kill_on_close: bool = True,
        default_ttl: int | None = None,
    ) -> None:
        self.client = client
        self.template = template
        self.kill_on_close = kill_on_close
        self.default_ttl = default_ttl
        self.created: dict[str, AsyncSandbox] = {}
        self._default: AsyncSandbox | None = None
        self._lock = anyio.Lock()

    async def get(self, sandbox_id: str | None = None) -> AsyncSandbox:
        """The sandbox `sandbox_id`, or the default one (made on first use)."""
        if sandbox_id:
            return self.created.get(sandbox_id) or await self.client.connect(sandbox_id)
        async with self._lock:
            if self._default is None:
                self._default = await self.create()
            return self._default

    async def create(self, template: str | None = None, **options: Any) -> AsyncSandbox:
        if options.get("ttl_seconds") is None and self.default_ttl is not None:
            options["ttl_seconds"] = self.default_ttl
        sandbox = await self.client.create_sandbox(template or self.template, **options)
        self.created[sandbox.id] = sandbox
        return sandbox

    def adopt(self, sandbox: AsyncSandbox) -> None:
        """Count a sandbox this session made another way (a fork) as made by the pool."""
        self.created[sandbox.id] = sandbox

    async def kill(self, sandbox_id: str) -> None:
        sandbox = self.created.pop(sandbox_id, None) or self.client.sandbox(sandbox_id)
        if self._default is not None and self._default.id == sandbox_id:
            self._default = None
        await sandbox.kill()

    async def close(self) -> None:
        """Kill every sandbox this pool made (with `kill_on_close`), then close the client.
        Never raises."""
        with anyio.CancelScope(shield=True):
            if self.kill_on_close:
                for sandbox_id in list(self.created):
                    try:
                        await self.kill(sandbox_id)
                    except CorralError as exc:
                        log.warning("could not kill sandbox %s: %s", sandbox_id, exc)
            await self.client.aclose()
