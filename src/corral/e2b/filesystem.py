"""envd's Filesystem service (Connect RPC) over corral's FileService and the agent.

Stat, ListDir, MakeDir, Move and Remove are the agent's file calls. Remove is recursive, as
envd's is. Directory watches are the agent's (inotify): ``WatchDir`` streams a watch's events
(long-polling the agent, a keepalive after each quiet interval) and removes the watch when the
stream ends; ``CreateWatcher`` / ``GetWatcherEvents`` / ``RemoveWatcher`` are the polling form,
a watcher id being the agent's watch id. Entry details in events (``include_entry``) are not
sent: corral reports an envd version before them, so the SDK does not ask.
"""

from __future__ import annotations

import contextlib
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from protobuf import Oneof
from protobuf.wkt import Timestamp

from corral.e2b.context import sandbox_of
from corral.e2b.envd.filesystem import filesystem_pb as pb
from corral.e2b.envd.filesystem.filesystem_connect import Filesystem
from corral.e2b.errors import connect_error_of
from corral.e2b.process import keepalive_interval
from corral.service.errors import CorralError
from corral.service.files import FileService

T = TypeVar("T")

EVENT_TYPES = {
    "create": pb.EventType.CREATE,
    "write": pb.EventType.WRITE,
    "remove": pb.EventType.REMOVE,
    "rename": pb.EventType.RENAME,
    "chmod": pb.EventType.CHMOD,
}
DEFAULT_POLL = 30.0
FILE_TYPES = {
    "file": pb.FileType.FILE,
    "dir": pb.FileType.DIRECTORY,
    "symlink": pb.FileType.SYMLINK,
}
TYPE_BITS = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "symlink": stat.S_IFLNK}
MAX_DEPTH = 16


def to_entry(info: dict[str, Any]) -> pb.EntryInfo:
    kind = info.get("type", "other")
    mode = int(info.get("mode", 0)) & 0o7777
    entry = pb.EntryInfo(
        name=info.get("name", ""),
        type=FILE_TYPES.get(kind, pb.FileType.UNSPECIFIED),
        path=info.get("path", ""),
        size=int(info.get("size", 0)),
        mode=mode,
        permissions=stat.filemode(mode | TYPE_BITS.get(kind, 0)),
        modified_time=Timestamp.from_seconds(float(info.get("mtime", 0.0))),
    )
    if info.get("target") is not None:
        entry.symlink_target = info["target"]
    return entry


class FilesystemHandler(Filesystem):
    """Implements ``filesystem.Filesystem`` for the sandbox the dispatcher put in the request."""

    def __init__(self, files: FileService) -> None:
        self._files = files

    async def _call(
        self, ctx: RequestContext[Any, Any], call: Callable[[FileService, str], Awaitable[T]]
    ) -> T:
        """``call(files, sandbox_id)`` for the request's sandbox, its refusals as Connect's."""
        sandbox_id = sandbox_of(ctx.request_headers)
        try:
            return await call(self._files, sandbox_id)
        except CorralError as exc:
            raise connect_error_of(sandbox_id, exc) from exc

    async def stat(self, request: pb.StatRequest, ctx: RequestContext[Any, Any]) -> pb.StatResponse:
        info = await self._call(ctx, lambda f, sid: f.stat(sid, request.path))
        return pb.StatResponse(entry=to_entry(info))

    async def make_dir(
        self, request: pb.MakeDirRequest, ctx: RequestContext[Any, Any]
    ) -> pb.MakeDirResponse:
        created = await self._call(ctx, lambda f, sid: f.mkdir(sid, request.path, True))
        if not created:
            raise ConnectError(Code.ALREADY_EXISTS, f"directory {request.path} already exists")
        info = await self._call(ctx, lambda f, sid: f.stat(sid, request.path))
        return pb.MakeDirResponse(entry=to_entry(info))

    async def move(self, request: pb.MoveRequest, ctx: RequestContext[Any, Any]) -> pb.MoveResponse:
        info = await self._call(
            ctx, lambda f, sid: f.move(sid, request.source, request.destination)
        )
        return pb.MoveResponse(entry=to_entry(info))

    async def list_dir(
        self, request: pb.ListDirRequest, ctx: RequestContext[Any, Any]
    ) -> pb.ListDirResponse:
        depth = request.depth or 1
        if depth > MAX_DEPTH:
            raise ConnectError(Code.INVALID_ARGUMENT, f"depth must be at most {MAX_DEPTH}")
        entries = await self._call(ctx, lambda f, sid: f.list_dir(sid, request.path, depth))
        return pb.ListDirResponse(entries=[to_entry(e) for e in entries])

    async def remove(
        self, request: pb.RemoveRequest, ctx: RequestContext[Any, Any]
    ) -> pb.RemoveResponse:
        await self._call(ctx, lambda f, sid: f.remove(sid, request.path, True))
        return pb.RemoveResponse()

    def _watcher_id(self, raw: str) -> int:
        if not raw.isdigit() or len(raw) > 9:
            raise ConnectError(Code.NOT_FOUND, f"no watcher {raw!r}")
        return int(raw)

    async def watch_dir(
        self, request: pb.WatchDirRequest, ctx: RequestContext[Any, Any]
    ) -> AsyncIterator[pb.WatchDirResponse]:
        watch_id = await self._call(
            ctx, lambda f, sid: f.create_watch(sid, request.path, request.recursive)
        )
        interval = keepalive_interval(ctx.request_headers) or DEFAULT_POLL
        try:
            yield _watch_response("start", pb.WatchDirResponse.StartEvent())
            while True:
                batch = await self._call(
                    ctx,
                    lambda f, sid: f.watch_events(
                        sid, watch_id, interval, action="watch directories in"
                    ),
                )
                for event in to_events(batch["events"]):
                    yield _watch_response("filesystem", event)
                if batch.get("closed"):
                    return
                if not batch["events"]:
                    yield _watch_response("keepalive", pb.WatchDirResponse.KeepAlive())
        finally:
            with contextlib.suppress(ConnectError):
                await self._call(ctx, lambda f, sid: f.remove_watch(sid, watch_id))

    async def create_watcher(
        self, request: pb.CreateWatcherRequest, ctx: RequestContext[Any, Any]
    ) -> pb.CreateWatcherResponse:
        watch_id = await self._call(
            ctx, lambda f, sid: f.create_watch(sid, request.path, request.recursive)
        )
        return pb.CreateWatcherResponse(watcher_id=str(watch_id))

    async def get_watcher_events(
        self, request: pb.GetWatcherEventsRequest, ctx: RequestContext[Any, Any]
    ) -> pb.GetWatcherEventsResponse:
        watch_id = self._watcher_id(request.watcher_id)
        batch = await self._call(ctx, lambda f, sid: f.watch_events(sid, watch_id, 0.0))
        return pb.GetWatcherEventsResponse(events=to_events(batch["events"]))

    async def remove_watcher(
        self, request: pb.RemoveWatcherRequest, ctx: RequestContext[Any, Any]
    ) -> pb.RemoveWatcherResponse:
        watch_id = self._watcher_id(request.watcher_id)
        await self._call(ctx, lambda f, sid: f.remove_watch(sid, watch_id))
        return pb.RemoveWatcherResponse()


def to_events(events: list[dict[str, Any]]) -> list[pb.FilesystemEvent]:
    return [
        pb.FilesystemEvent(name=str(e.get("name", "")), type=EVENT_TYPES[e["type"]])
        for e in events
        if e.get("type") in EVENT_TYPES
    ]


def _watch_response(kind: str, value: Any) -> pb.WatchDirResponse:
    chosen: Any = Oneof(kind, value)
    return pb.WatchDirResponse(event=chosen)
