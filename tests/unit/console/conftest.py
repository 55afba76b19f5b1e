"""Fixtures of the console's unit tests: the daemon's app served by uvicorn on a loopback port,
in the test's own event loop, over the unit harness (agents as host processes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from corral.api.app import create_app
from tests.unit.conftest import Harness, free_port


@dataclass
class Served:
    url: str
    key: str
    harness: Harness

    @property
    def origin(self) -> str:
        return self.url

    def client(self, **headers: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30)

    async def logged_in(self) -> tuple[httpx.AsyncClient, str]:
        """A browser-like client logged in with a one-time token: (client, CSRF token)."""
        async with self.client(authorization=f"Bearer {self.key}") as cli:
            answer = await cli.post("/v1/console/login-tokens")
            answer.raise_for_status()
            token = answer.json()["token"]
        browser = self.client(origin=self.origin)
        login = await browser.post("/console/api/session", json={"token": token})
        login.raise_for_status()
        return browser, login.json()["csrf"]


@pytest.fixture
async def served(harness: Harness, tmp_path: Path) -> AsyncIterator[Served]:
    static = tmp_path / "console-static"
    (static / "assets").mkdir(parents=True)
    (static / "index.html").write_text("<!doctype html><title>corral</title><div id=app></div>")
    (static / "assets" / "app-1234.js").write_text("console.log('corral')")
    app = create_app(harness.workspace, manage_lifespan=False, console_dir=static)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    key = harness.settings.admin_key_path.read_text().strip()
    try:
        yield Served(f"http://127.0.0.1:{port}", key, harness)
    finally:
        server.should_exit = True
        await task
