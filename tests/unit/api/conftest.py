"""Fixtures of the API's unit tests: the app on the unit harness, reached in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from corral.api.app import create_app
from tests.unit.conftest import Harness


@pytest.fixture
async def client(harness: Harness) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the app with the workspace's admin key."""
    app = create_app(harness.workspace, manage_lifespan=False)
    key = (harness.settings.admin_key_path).read_text().strip()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://corral", headers={"Authorization": f"Bearer {key}"}
    ) as c:
        yield c
