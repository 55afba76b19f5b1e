"""NDJSON answers: every event as a line, and a client that leaves ends the stream at once,
closing its source (an agent's stream), whatever the source is waiting on; a stream whose last
event is known ends with it, in the same piece as the answer's end, and its source is still read
to its end."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.types import Message

from corral.api import streams
from corral.api.streams import NDJSON, is_exit, ndjson_response

SCOPE: dict[str, Any] = {"type": "http", "method": "POST", "path": "/x", "headers": []}


class Source:
    """Events, then (with ``hang``) a wait that never ends; notes whether it was closed."""

    def __init__(self, events: list[dict[str, Any]], *, hang: bool = False) -> None:
        self.events = events
        self.hang = hang
        self.closed = False
        self.waiting = asyncio.Event()

    async def __call__(self) -> AsyncIterator[dict[str, Any]]:
        try:
            for event in self.events:
                yield event
            if self.hang:
                self.waiting.set()
                await asyncio.Event().wait()
        finally:
            self.closed = True


class Client:
    """The ASGI side of one request: what was sent, and a disconnect to give on demand."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.leave = asyncio.Event()
        self.requests: list[Message] = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive(self) -> Message:
        if self.requests:
            return self.requests.pop()
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    def lines(self) -> list[dict[str, Any]]:
        body = b"".join(m.get("body", b"") for m in self.sent[1:])
        return [json.loads(line) for line in body.splitlines()]


async def test_every_event_is_a_line_and_the_answer_ends() -> None:
    source, client = (
        Source([{"type": "stdout", "data": "hi\n"}, {"type": "exit", "code": 0}]),
        Client(),
    )
    await ndjson_response(source())(SCOPE, client.receive, client.send)
    start = client.sent[0]
    assert start["status"] == 200 and (b"content-type", NDJSON.encode()) in start["headers"]
    assert client.lines() == source.events
    assert client.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert source.closed


async def test_a_client_that_leaves_ends_the_stream_and_closes_its_source() -> None:
    source, client = Source([{"type": "start", "pid": 7}], hang=True), Client()
    answering = asyncio.create_task(ndjson_response(source())(SCOPE, client.receive, client.send))
    await source.waiting.wait()
    client.leave.set()
    await asyncio.wait_for(answering, 10)  # ends by itself: the source would wait forever
    assert source.closed
    assert client.lines() == [{"type": "start", "pid": 7}]
    assert not any(m.get("more_body") is False for m in client.sent)  # cut, not completed
    assert not answering.cancelled() and answering.cancelling() == 0  # ended, not cancelled


async def test_a_cancel_from_elsewhere_still_cancels() -> None:
    source, client = Source([], hang=True), Client()
    answering = asyncio.create_task(ndjson_response(source())(SCOPE, client.receive, client.send))
    await source.waiting.wait()
    answering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await answering
    assert source.closed


async def test_a_failing_source_fails_the_answer() -> None:
    async def failing() -> AsyncIterator[dict[str, Any]]:
        yield {"type": "start", "pid": 1}
        raise RuntimeError("agent broke")

    client = Client()
    with pytest.raises(RuntimeError, match="agent broke"):
        await ndjson_response(failing())(SCOPE, client.receive, client.send)


class Draining(Source):
    """A source that notes whether it was read past its exit event to its end."""

    def __init__(self, events: list[dict[str, Any]], *, hang: bool = False) -> None:
        super().__init__(events, hang=hang)
        self.exhausted = False

    async def __call__(self) -> AsyncIterator[dict[str, Any]]:
        async for event in super().__call__():
            yield event
        self.exhausted = True


async def test_the_exit_ends_the_answer_in_one_piece_and_the_source_is_read_to_its_end() -> None:
    events: list[dict[str, Any]] = [{"type": "start", "pid": 7}, {"type": "exit", "exit_code": 0}]
    events.append({"type": "late"})
    source, client = Draining(events), Client()
    await ndjson_response(source(), ends_with=is_exit)(SCOPE, client.receive, client.send)
    assert client.lines() == events[:2]  # nothing after the exit reaches the client
    last = client.sent[-1]
    assert last["more_body"] is False and json.loads(last["body"]) == events[1]
    assert source.exhausted and source.closed  # read on to the end (the agent's connection)


async def test_a_source_that_never_ends_after_its_exit_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams, "DRAIN_SECONDS", 0.05)
    source, client = Draining([{"type": "exit", "exit_code": 0}], hang=True), Client()
    await asyncio.wait_for(
        ndjson_response(source(), ends_with=is_exit)(SCOPE, client.receive, client.send), 10
    )
    assert client.sent[-1]["more_body"] is False
    assert source.closed and not source.exhausted
