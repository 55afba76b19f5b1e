"""The agent's routes (docs/agent-protocol.md): each request mapped onto the process table
and the file operations, and the event streams written as chunked NDJSON.

``Handler`` is the ``Connection`` of the agent's server; it holds no state of its own beyond the
request it is answering. ``VERSION`` is the protocol version that ``GET /health`` reports.
"""

from __future__ import annotations

import os

from .errors import ApiError, bad_request, os_error
from .fields import parse_signal, str_dict
from .files import (
    file_stat,
    list_dir,
    make_dir,
    move_path,
    receive_file,
    remove_path,
    resolve_path,
    send_file,
)
from .http import Connection
from .keys import authorized, valid_key
from .process import encode_events
from .wire import LAST_CHUNK, STREAM_HEAD, chunk, parse_flag, parse_int

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket

    from .process import Process
    from .processes import Agent

VERSION = "1"


class Handler(Connection):
    """One connection to the agent, answering requests against ``agent``."""

    def __init__(self, connection: _socket.socket, agent: Agent) -> None:
        super().__init__(connection)
        self.agent = agent

    def route(self, method: str, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        agent = self.agent
        if not authorized(self.headers.get("authorization"), agent.key):
            if parts == ["health"] and method == "GET":  # readiness: reveals and does nothing
                return self.send_json(200, {"ok": True})
            self.close_connection = True  # and its body is not read
            raise ApiError(401, "unauthorized", "this agent answers only its daemon (no valid key)")
        if parts == ["health"] and method == "GET":
            return self.send_json(
                200,
                {"ok": True, "version": VERSION, "boot_id": agent.boot_id, "pid": os.getpid()},
            )
        if parts == ["config"] and method == "PUT":
            body = self.read_json()
            agent.set_env(str_dict(body.get("env"), "env"), merge=body.get("merge") is True)
            return self.send_empty()
        if parts == ["rekey"] and method == "POST":
            return self._rekey(self.read_json())
        if parts and parts[0] == "processes":
            return self._route_processes(method, parts[1:])
        if parts and parts[0] == "files":
            return self._route_files(method, parts[1:])
        if parts and parts[0] == "watches":
            return self._route_watches(method, parts[1:])
        raise ApiError(404, "not_found", f"no route {method} {path}")

    def _route_processes(self, method: str, rest: list[str]) -> None:
        agent = self.agent
        if not rest:
            if method == "POST":
                return self._start_process()
            if method == "GET":
                procs = [p.describe() for p in agent.all_processes()]
                return self.send_json(200, {"processes": procs})
        else:
            pid = parse_int(rest[0], "pid")
            action = rest[1] if len(rest) == 2 else None
            if len(rest) == 1 and method == "GET":
                return self.send_json(200, agent.get(pid).describe())
            if len(rest) == 1 and method == "DELETE":
                agent.forget(pid)
                return self.send_empty()
            if action == "events" and method == "GET":
                proc = agent.get(pid)
                after = parse_int(self.query.get("after"), "after", -1)
                follow = parse_flag(self.query, "follow", False)
                end = None if follow else proc.snapshot_end()
                self.wfile.write(STREAM_HEAD)  # answer at once even if no event is ready yet
                self._stream_events(proc, proc.attach(after), after, end, head=b"")
                return None
            if action == "stdin" and method == "POST":
                return self._write_stdin(agent.get(pid))
            if action == "close-stdin" and method == "POST":
                proc = agent.get(pid)
                with proc.stdin_lock:
                    if proc.child.stdin is not None:
                        proc.child.stdin.close()
                return self.send_empty()
            if action == "resize" and method == "POST":
                agent.resize(agent.get(pid), self.read_json())
                return self.send_empty()
            if action == "signal" and method == "POST":
                proc = agent.get(pid)
                signum = parse_signal(self.read_json().get("signal"))
                proc.stopped = True  # a supervised process that is signalled stays stopped
                try:
                    sent = proc.kill_group(signum)
                except OSError as exc:
                    raise os_error(exc, f"sending signal {signum} to process {pid}") from None
                if not sent:
                    raise ApiError(409, "conflict", f"process {pid} has already finished")
                return self.send_empty()
        raise ApiError(404, "not_found", f"no route {method} {self.path}")

    def _route_files(self, method: str, rest: list[str]) -> None:
        if not rest and method == "DELETE":
            path, raw = resolve_path(self.query.get("path"))
            remove_path(path, raw, parse_flag(self.query, "recursive", False))
            return self.send_empty()
        what = rest[0] if len(rest) == 1 else None
        if what == "content" and method == "GET":
            return send_file(self, *resolve_path(self.query.get("path")))
        if what == "content" and method == "PUT":
            return receive_file(self, *resolve_path(self.query.get("path")))
        if what == "stat" and method == "GET":
            return self.send_json(200, file_stat(*resolve_path(self.query.get("path"))))
        if what == "list" and method == "GET":
            path, raw = resolve_path(self.query.get("path"))
            depth = parse_int(self.query.get("depth"), "depth", 1)
            if depth < 1:
                raise bad_request("'depth' must be at least 1")
            return self.send_json(200, {"entries": list_dir(path, raw, depth)})
        if what == "mkdir" and method == "POST":
            body = self.read_json()
            path, raw = resolve_path(body.get("path"))
            created = make_dir(path, raw, bool(body.get("parents", True)))
            return self.send_json(200, {"created": created})
        if what == "move" and method == "POST":
            body = self.read_json()
            src, src_raw = resolve_path(body.get("src"))
            dst, dst_raw = resolve_path(body.get("dst"))
            return self.send_json(200, move_path(src, src_raw, dst, dst_raw))
        raise ApiError(404, "not_found", f"no route {method} {self.path}")

    def _route_watches(self, method: str, rest: list[str]) -> None:
        watches = self.agent.watches()
        if not rest and method == "POST":
            body = self.read_json()
            path, _ = resolve_path(body.get("path"))
            watch = watches.create(path, bool(body.get("recursive")))
            return self.send_json(201, {"id": watch.id})
        watch_id = parse_int(rest[0], "watch id") if rest else 0
        if len(rest) == 1 and method == "DELETE":
            watches.remove(watch_id)
            return self.send_empty()
        if len(rest) == 2 and rest[1] == "events" and method == "GET":
            wait = float(parse_int(self.query.get("wait_ms"), "wait_ms", 0)) / 1000
            return self.send_json(200, watches.get(watch_id).take(wait))
        raise ApiError(404, "not_found", f"no route {method} {self.path}")

    def _rekey(self, body: dict[str, object]) -> None:
        key, boot_id, seed = body.get("key"), body.get("boot_id"), body.get("seed")
        if not valid_key(key):
            raise bad_request("'key' must be 64 lowercase hex digits")
        if not (isinstance(boot_id, str) and 0 < len(boot_id) <= 64 and boot_id.isalnum()):
            raise bad_request("'boot_id' must be 1 to 64 letters or digits")
        if not isinstance(seed, str) or len(seed) > 256:
            raise bad_request("'seed' must be a hex string of at most 256 digits")
        try:
            seed_bytes = bytes.fromhex(seed)
        except ValueError:
            raise bad_request("'seed' must be a hex string of at most 256 digits") from None
        assert isinstance(key, str)
        self.agent.rekey(key, boot_id, seed_bytes)
        self.send_json(200, {"boot_id": boot_id})

    # -- processes ---------------------------------------------------------------------------

    def _start_process(self) -> None:
        stream = parse_flag(self.query, "stream", False)
        forget = parse_flag(self.query, "forget", False)
        proc, fid = self.agent.spawn(self.read_json(), follow=stream)
        if fid is None:
            return self.send_json(201, {"pid": proc.pid})
        delivered = self._stream_events(proc, fid, -1, None, head=STREAM_HEAD)
        if forget and delivered and not self.peer_closed():
            self.agent.forget_delivered(proc)

    def _stream_events(
        self, proc: Process, fid: int, after: int, end: int | None, head: bytes
    ) -> bool:
        """Write the events after ``after`` as chunked NDJSON, ``head`` (if any) first; True
        once the last one was written, False if the client went away before."""
        cursor = after
        try:
            while True:
                batch, cursor, done = proc.next_batch(fid, cursor, end)
                data = encode_events(batch)
                out = chunk(data) if data else b""
                if done:
                    out += LAST_CHUNK
                if out or head:
                    self.wfile.write(head + out)
                    head = b""
                if done:
                    return True
        except OSError:
            self.close_connection = True  # the client went away mid-stream
            return False
        finally:
            proc.detach(fid)

    def _write_stdin(self, proc: Process) -> None:
        assert self.body is not None
        with proc.stdin_lock:
            pipe = proc.child.stdin
            if pipe is None:
                raise ApiError(409, "conflict", f"process {proc.pid} was started without stdin")
            if pipe.closed:
                raise ApiError(409, "conflict", f"stdin of process {proc.pid} is closed")
            fd = pipe.fileno()
            while data := self.body.read():
                view = memoryview(data)
                while view:
                    try:
                        written = os.write(fd, view)
                    except BrokenPipeError:
                        raise ApiError(
                            409, "conflict", f"process {proc.pid} no longer reads its stdin"
                        ) from None
                    view = view[written:]
        self.send_empty()
