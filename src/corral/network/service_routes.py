"""Where a sandbox's connection to a sandbox service goes: the egress proxy asks, the service
layer answers.

The answer needs the service layer (the target sandbox's slot address, waking it first when it
is parked with auto-wake), and the service layer's sandboxes need the egress control under them;
so neither is handed the other. ``ServiceRoutes`` is made first and given to both at
construction: the proxy ``ask``s, and the service layer ``serve``s the questions with its router
for as long as the workspace runs. Nothing is set on either side after it is built, and the
network layer holds no service object.

Invariants: every question is answered once, with the target's ``(address, port)`` or a
``LookupError`` (the proxy then resets the connection). A question asked before serving starts
waits for it; when serving stops, whatever is still waiting or being routed fails. At most
``max_waiting`` questions wait at once; more fail at once. One event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from corral.network.egress_decision import ServiceRouter

__all__ = ["ServiceRoutes"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Question:
    sandbox_id: str
    address: str
    port: int
    answer: asyncio.Future[tuple[str, int]]


class ServiceRoutes:
    """The questions from the egress proxy to the service layer (see the module docstring)."""

    def __init__(self, *, max_waiting: int = 1024) -> None:
        self._waiting: asyncio.Queue[_Question] = asyncio.Queue(max_waiting)

    async def ask(self, sandbox_id: str, address: str, port: int) -> tuple[str, int]:
        """Where ``sandbox_id``'s connection to ``address:port`` goes; LookupError if nowhere."""
        answer: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
        try:
            self._waiting.put_nowait(_Question(sandbox_id, address, port, answer))
        except asyncio.QueueFull:
            raise LookupError("too many connections to sandbox services are waiting") from None
        return await answer

    async def serve(self, router: ServiceRouter) -> None:
        """Answer the questions with ``router``, each in its own task, until cancelled."""
        routing: set[asyncio.Task[None]] = set()
        try:
            while True:
                question = await self._waiting.get()
                if question.answer.done():  # its connection is gone already
                    continue
                task = asyncio.create_task(self._answer(router, question))
                routing.add(task)
                task.add_done_callback(routing.discard)
        finally:
            for task in routing:
                task.cancel()
            if routing:
                await asyncio.gather(*routing, return_exceptions=True)
            while not self._waiting.empty():
                _fail(self._waiting.get_nowait(), "the daemon is stopping")

    @staticmethod
    async def _answer(router: ServiceRouter, question: _Question) -> None:
        try:
            target = await router(question.sandbox_id, question.address, question.port)
        except asyncio.CancelledError:
            _fail(question, "the daemon is stopping")
            raise
        except LookupError as exc:
            _fail(question, str(exc))
        except Exception as exc:
            log.exception("routing %s:%d failed", question.address, question.port)
            _fail(question, f"routing failed: {exc}")
        else:
            if not question.answer.done():
                question.answer.set_result(target)


def _fail(question: _Question, why: str) -> None:
    with contextlib.suppress(asyncio.InvalidStateError):
        question.answer.set_exception(LookupError(why))
