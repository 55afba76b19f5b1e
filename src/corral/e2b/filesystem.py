"""envd's Filesystem service (Connect RPC) over corral's FileService and the agent.

Stat, ListDir, MakeDir, Move and Remove are the agent's file calls; directory watching is not
served yet (UNIMPLEMENTED). Remove is recursive, as envd's is.
"""

from __future__ import annotations

import stat
from collections.abc import AsyncIterator
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from protobuf.wkt import Timestamp

from corral.e2b.context import sandbox_of
from corral.e2b.envd.filesystem import filesystem_pb as pb
from corral.e2b.envd.filesystem.filesystem_connect import Filesystem
from corral.e2b.errors import connect_error_of
from corral.service.errors import CorralError
from corral.service.workspace import Workspace

WATCH_NOT_YET = "corral does not watch directories yet"
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

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws

    async def _call(self, ctx: RequestContext, action: str, method: str, *args: Any) -> Any:
        sandbox_id = sandbox_of(ctx.request_headers)
        try:
            return await self._ws.files.call(sandbox_id, action, method, *args)
        except CorralError as exc:
            raise connect_error_of(sandbox_id, exc) from exc

    async def stat(self, request: pb.StatRequest, ctx: RequestContext) -> pb.StatResponse:
        info = await self._call(ctx, "stat files of", "stat", request.path)
        return pb.StatResponse(entry=to_entry(info))

    async def make_dir(self, request: pb.MakeDirRequest, ctx: RequestContext) -> pb.MakeDirResponse:
        created = await self._call(ctx, "make directories in", "mkdir", request.path, True)
        if isinstance(created, dict):
            created = created.get("created")
        if not created:
            raise ConnectError(Code.ALREADY_EXISTS, f"directory {request.path} already exists")
        info = await self._call(ctx, "stat files of", "stat", request.path)
        return pb.MakeDirResponse(entry=to_entry(info))

    async def move(self, request: pb.MoveRequest, ctx: RequestContext) -> pb.MoveResponse:
        info = await self._call(ctx, "move files in", "move", request.source, request.destination)
        return pb.MoveResponse(entry=to_entry(info))

    async def list_dir(self, request: pb.ListDirRequest, ctx: RequestContext) -> pb.ListDirResponse:
        depth = request.depth or 1
        if depth > MAX_DEPTH:
            raise ConnectError(Code.INVALID_ARGUMENT, f"depth must be at most {MAX_DEPTH}")
        listed = await self._call(ctx, "list files of", "list_dir", request.path, depth)
        entries = listed["entries"] if isinstance(listed, dict) else listed
        return pb.ListDirResponse(entries=[to_entry(e) for e in entries])

    async def remove(self, request: pb.RemoveRequest, ctx: RequestContext) -> pb.RemoveResponse:
        await self._call(ctx, "remove files in", "remove", request.path, True)
        return pb.RemoveResponse()

    def watch_dir(
        self, request: pb.WatchDirRequest, ctx: RequestContext
    ) -> AsyncIterator[pb.WatchDirResponse]:
        raise ConnectError(Code.UNIMPLEMENTED, WATCH_NOT_YET)

    async def create_watcher(
        self, request: pb.CreateWatcherRequest, ctx: RequestContext
    ) -> pb.CreateWatcherResponse:
        raise ConnectError(Code.UNIMPLEMENTED, WATCH_NOT_YET)

    async def get_watcher_events(
        self, request: pb.GetWatcherEventsRequest, ctx: RequestContext
    ) -> pb.GetWatcherEventsResponse:
        raise ConnectError(Code.UNIMPLEMENTED, WATCH_NOT_YET)

    async def remove_watcher(
        self, request: pb.RemoveWatcherRequest, ctx: RequestContext
    ) -> pb.RemoveWatcherResponse:
        raise ConnectError(Code.UNIMPLEMENTED, WATCH_NOT_YET)
