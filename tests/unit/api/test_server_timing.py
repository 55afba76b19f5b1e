"""The Server-Timing header (setting ``server_timing``): a create answered with the time of its
steps when the workspace asks for it, and with no such header by default."""

from __future__ import annotations

import httpx

from corral.api.app import create_app
from tests.unit.conftest import Harness


async def _create(harness: Harness) -> httpx.Response:
    app = create_app(harness.workspace, manage_lifespan=False)
    key = harness.settings.admin_key_path.read_text().strip()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://corral",
        headers={"Authorization": f"Bearer {key}"},
    ) as client:
        created = await client.post("/v1/sandboxes", json={})
        assert created.status_code == 201
        return created


async def test_a_create_answers_the_time_of_its_steps(harness: Harness) -> None:
    harness.workspace.settings.server_timing = True
    created = await _create(harness)
    steps = {}
    for part in created.headers["server-timing"].split(","):
        name, _, rest = part.strip().partition(";dur=")
        steps[name] = float(rest.split(";")[0])
    assert {"admit", "slot-lease", "agent-ready", "db-commit", "total"} <= steps.keys()
    assert sum(ms for name, ms in steps.items() if name != "total") <= steps["total"]


async def test_no_timing_header_unless_the_workspace_asks(harness: Harness) -> None:
    assert "server-timing" not in (await _create(harness)).headers
