"""Work a lifecycle call leaves behind once it has answered (a park's teardown, a woken sandbox's
image removal): run as tasks of the event loop, kept until they end, waited for at daemon stop.

Only work whose loss a restart makes good may go here: the call's answer never depends on it,
and ``reconcile.py`` clears what a crash leaves undone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

__all__ = ["Background"]


class Background:
    """The tasks left behind by one service's calls (event-loop only)."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def run(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, timeout: float = 10.0) -> None:
        """Let the tasks left finish (daemon stop); they are short."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
