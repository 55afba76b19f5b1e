"""The events of one running build: kept for the API's streams and written to the build's log.

The log is NDJSON, one file per template name (``<data>/build-logs``), kept after the build for
``corral template logs``. The output kept is capped (see ``BuildHandle``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

__all__ = ["BuildHandle", "Event"]

Event = dict[str, Any]


class BuildHandle:
    """The events of one running build; every event is also written to the build's log.

    Output kept is capped at ``max_output`` bytes of ``data`` (in memory and in the log): past it
    output events are dropped, after one marker event saying so, and before the last event a
    second marker says how much was dropped."""

    def __init__(
        self,
        name: str,
        log_path: Path,
        max_output: int = 2 << 20,
        *,
        on_progress: Callable[[Event], None] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_path
        self.max_output = max_output
        self._events: list[Event] = []
        self._changed = asyncio.Condition()
        self.finished = False
        self.task: asyncio.Task[None] | None = None  # the build, once started
        self._output = 0
        self._dropped = 0
        self._dropped_events = 0
        # Told of every event but output (steps, the end): the workspace's event stream.
        self.on_progress = on_progress
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "w", buffering=1)  # noqa: SIM115 - closed at finish

    def _marker(self, text: str, index: object = None) -> Event:
        return {
            "time": round(time.time(), 3),
            "type": "output",
            "index": index,
            "stream": "info",
            "data": text + "\n",
        }

    async def emit(self, event: Event) -> None:
        if event.get("type") == "output":
            size = len(str(event.get("data") or ""))
            if self._output + size > self.max_output:
                if not self._dropped:
                    self._append(
                        self._marker(
                            f"[corral: the build's output is over the log cap of "
                            f"{self.max_output} bytes; further output is dropped]",
                            event.get("index"),
                        )
                    )
                self._dropped += size
                self._dropped_events += 1
                return
            self._output += size
        if event.get("type") in ("done", "failed") and self._dropped:
            self._append(
                self._marker(
                    f"[corral: dropped {self._dropped} bytes of build output "
                    f"({self._dropped_events} output events) past the log cap of "
                    f"{self.max_output} bytes]"
                )
            )
        self._append({"time": round(time.time(), 3), **event})
        if self.on_progress is not None and event.get("type") != "output":
            self.on_progress(event)
        async with self._changed:
            self._changed.notify_all()

    def _append(self, event: Event) -> None:
        self._events.append(event)
        self._log.write(json.dumps(event, separators=(",", ":")) + "\n")
        if event["type"] in ("done", "failed"):
            self.finished = True
            self._log.close()

    def _moved_past(self, count: int) -> bool:
        return len(self._events) > count or self.finished

    async def events(self) -> AsyncIterator[Event]:
        """Every event from the start, then new ones as they come, until done or failed."""
        sent = 0
        while True:
            while sent < len(self._events):
                yield self._events[sent]
                sent += 1
            if self.finished:
                return
            async with self._changed:
                await self._changed.wait_for(partial(self._moved_past, sent))
