"""The private event loop behind the sync SDK.

The sync classes do not reimplement anything: each call hands a coroutine of the async core to
one asyncio loop running in a daemon thread and waits for its result. The loop starts on first
use (never at import) and is shared by every sync object in the process, so the httpx clients
they own always live on the loop they were made for.

Callbacks passed to sync calls (`on_stdout`, ...) run on that loop's thread; calling the sync
SDK from inside one would wait on itself, so it raises instead of deadlocking.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["Portal", "portal"]

T = TypeVar("T")


class Portal:
    """Runs coroutines on a private loop thread for synchronous callers."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="corral-sdk-loop", daemon=True
        )
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and return its result (Ctrl-C cancels it)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(
                "the sync corral SDK was called from one of its own callbacks; "
                "use AsyncSandbox inside callbacks"
            )
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        """Drive an async iterator from sync code, one item per round trip to the loop."""

        async def next_item() -> tuple[bool, T | None]:
            try:
                return True, await iterator.__anext__()
            except StopAsyncIteration:
                return False, None

        try:
            while True:
                more, item = self.call(next_item())
                if not more:
                    return
                yield item  # type: ignore[misc]
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                self.call(aclose())


_portal: Portal | None = None
_portal_pid = 0
_portal_lock = threading.Lock()


def portal() -> Portal:
    """The process-wide portal, started on first use (and again in a forked child, which does
    not inherit the loop thread)."""
    global _portal, _portal_pid
    with _portal_lock:
        if _portal is None or _portal_pid != os.getpid():
            _portal, _portal_pid = Portal(), os.getpid()
        return _portal
