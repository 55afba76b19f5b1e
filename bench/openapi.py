"""How long the daemon's event loop stalls while the first ``GET /openapi.json`` is served.

corral builds the document once in a worker thread while the app starts, before the listener
opens (``api/openapi_document.py``); the baseline, measured in the same run (interleaved, each
cold in a new child process), is FastAPI's own route, which builds it in the handler, on the
loop. A ticker task wakes every 5 ms; the figure is its longest gap while the request is
answered. No daemon, no sandboxes: ``.venv/bin/python bench/openapi.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from corral.api.app import create_app
from corral.config import Settings
from corral.daemon import open_workspace


async def longest_stall(serve: Callable[[], Awaitable[int]]) -> tuple[float, float]:
    """(longest loop gap, wall time) in ms while ``serve`` runs; the gap is the ticker's."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last - 0.005)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.02)
    started = time.perf_counter()
    size = await serve()
    wall = time.perf_counter() - started
    done.set()
    await ticker
    assert size > 10_000, size
    return max(gaps) * 1000, wall * 1000


def measure(data_dir: str, which: str) -> tuple[float, float]:
    """One cold measurement (run in a fresh child: the document was never built in it)."""
    settings = Settings(data_dir=Path(data_dir)).resolved()  # type: ignore[call-arg]
    app = create_app(open_workspace(settings), manage_lifespan=False)

    async def run() -> tuple[float, float]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://corral") as client:
            (await client.get("/healthz")).raise_for_status()  # the app's own first-call costs

            async def corral_route() -> int:
                answer = await client.get("/openapi.json")
                answer.raise_for_status()
                return len(answer.content)

            async def fastapi_route() -> int:  # FastAPI's own openapi handler does this
                return len(str(app.openapi()))

            if which == "fastapi":
                return await longest_stall(fastapi_route)
            async with app.router.lifespan_context(app):  # the daemon's startup, then listening
                return await longest_stall(corral_route)

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    figures: dict[str, list[tuple[float, float]]] = {"corral": [], "fastapi": []}
    forked = multiprocessing.get_context("fork")
    with forked.Pool(1, maxtasksperchild=1) as pool:
        for _ in range(runs):
            for which in figures:  # interleaved, each in a new child
                with tempfile.TemporaryDirectory() as data_dir:
                    figures[which].append(pool.apply(measure, (data_dir, which)))
    (stall, wall), (base_stall, base_wall) = (
        (statistics.median(s for s, _ in figures[k]), statistics.median(w for _, w in figures[k]))
        for k in ("corral", "fastapi")
    )
    print(f"load average {os.getloadavg()[0]:.1f}, {runs} cold runs each, medians")
    print(f"corral /openapi.json first answer: {wall:.0f} ms, longest loop stall {stall:.0f} ms")
    print(f"FastAPI's own route (baseline): {base_wall:.0f} ms, loop stall {base_stall:.0f} ms")
    print(f"loop stall corral/baseline: {stall / base_stall:.3f}")


if __name__ == "__main__":
    main()
