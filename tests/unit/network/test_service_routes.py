"""The questions from the egress proxy to the service layer (``ServiceRoutes``): each answered
once, with the router's target or a LookupError, also when serving starts late or stops."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from corral.network.service_routes import ServiceRoutes


class Router:
    """Routes port 5432 of 10.9.0.1 to 10.200.0.2:5432; waits on ``gate`` for port 7."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, int]] = []
        self.gate = asyncio.Event()

    async def __call__(self, sandbox_id: str, address: str, port: int) -> tuple[str, int]:
        self.asked.append((sandbox_id, address, port))
        if port == 7:
            await self.gate.wait()
        if (address, port) in (("10.9.0.1", 5432), ("10.9.0.1", 7)):
            return "10.200.0.2", port
        if port == 13:
            raise RuntimeError("the store is gone")
        raise LookupError(f"no sandbox service at {address}:{port}")


@contextlib.asynccontextmanager
async def serving(routes: ServiceRoutes, router: Router) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(routes.serve(router))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_question_gets_the_routers_target_or_its_refusal() -> None:
    routes, router = ServiceRoutes(), Router()
    async with serving(routes, router):
        assert await routes.ask("sb-a", "10.9.0.1", 5432) == ("10.200.0.2", 5432)
        with pytest.raises(LookupError, match=r"no sandbox service at 10\.9\.0\.2:80"):
            await routes.ask("sb-a", "10.9.0.2", 80)
        with pytest.raises(LookupError, match="routing failed: the store is gone"):
            await routes.ask("sb-a", "10.9.0.2", 13)
    assert router.asked == [
        ("sb-a", "10.9.0.1", 5432),
        ("sb-a", "10.9.0.2", 80),
        ("sb-a", "10.9.0.2", 13),
    ]


async def test_a_question_asked_before_serving_waits_for_it() -> None:
    routes, router = ServiceRoutes(), Router()
    asked = asyncio.create_task(routes.ask("sb-a", "10.9.0.1", 5432))
    await asyncio.sleep(0)  # the question is queued, nothing answers yet
    assert not asked.done()
    async with serving(routes, router):
        assert await asked == ("10.200.0.2", 5432)


async def test_a_slow_route_does_not_hold_up_the_others() -> None:
    routes, router = ServiceRoutes(), Router()
    async with serving(routes, router):
        slow = asyncio.create_task(routes.ask("sb-a", "10.9.0.1", 7))
        assert await routes.ask("sb-b", "10.9.0.1", 5432) == ("10.200.0.2", 5432)
        assert not slow.done()
        router.gate.set()
        assert await slow == ("10.200.0.2", 7)


async def test_stopping_fails_what_is_waiting_or_being_routed() -> None:
    routes, router = ServiceRoutes(), Router()
    async with serving(routes, router):
        routing = asyncio.create_task(routes.ask("sb-a", "10.9.0.1", 7))
        while not router.asked:
            await asyncio.sleep(0)
    with pytest.raises(LookupError, match="stopping"):
        await routing
    async with serving(routes, router) as task:
        await asyncio.sleep(0)  # serving, waiting for a question
        waiting = asyncio.create_task(routes.ask("sb-a", "10.9.0.1", 5432))
        await asyncio.sleep(0)  # the question is queued, not yet taken
        task.cancel()
    with pytest.raises(LookupError, match="stopping"):
        await waiting
    assert [port for _, _, port in router.asked] == [7]


async def test_a_full_queue_refuses_at_once_and_a_gone_asker_is_skipped() -> None:
    routes, router = ServiceRoutes(max_waiting=1), Router()
    gone = asyncio.create_task(routes.ask("sb-a", "10.9.0.1", 5432))
    await asyncio.sleep(0)
    with pytest.raises(LookupError, match="too many"):
        await routes.ask("sb-b", "10.9.0.1", 5432)
    gone.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await gone
    async with serving(routes, router):
        await asyncio.sleep(0)  # the gone asker's question is taken and dropped
        assert await routes.ask("sb-c", "10.9.0.1", 5432) == ("10.200.0.2", 5432)
    assert router.asked == [("sb-c", "10.9.0.1", 5432)]
