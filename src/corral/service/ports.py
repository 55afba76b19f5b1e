"""Inbound ports: which ports of a sandbox the daemon lets outside clients reach, and how.

A port is opened per sandbox (``open``) and stays open across park/wake and daemon restarts
until it is closed or the sandbox ends; forks and restored snapshots get new ids, so none of
their ports are open. An open port is reached through the daemon's inbound proxy
(``corral.api.inbound``) by path (``/sandboxes/ID/ports/PORT/...``) or by host name
(``PORT-ID.<domain>``), with the port's access token unless it was opened public.

Tokens: ``HMAC-SHA256(secret, "ID:PORT:NONCE")``, hex, with the secret in ``DATA/ports.secret``
(0600) and a random nonce stored per open port; so a token names exactly one port of one
sandbox, survives restarts, and changes when the port is closed and opened again.

The reusable entry points for any front that routes inbound traffic (the E2B front's host
names, for one):

- ``check_access(sandbox_id, port, token)``: may this credential reach that port;
- ``resolve_inbound(sandbox_id, port)``: the address to connect to, waking a parked
  sandbox that has auto-wake;
- ``activity(sandbox_id)``: a context manager marking a connection in flight (idle auto-park);
- ``connection(sandbox_id, port)``: the same for a connection to an open port, whose task is
  cancelled when the port is closed (so closing a port cuts the connections through it).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.at_rest import load_or_make_key
from corral.service.errors import (
    Forbidden,
    InvalidRequest,
    NotFound,
    SandboxUnavailable,
    StateConflict,
    Unauthorized,
)
from corral.service.lifecycle.wake import WakeService
from corral.service.model import LIVE_STATES, SandboxState
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.activity import Activity
from corral.storage import SandboxPortRecord

__all__ = ["InboundTarget", "OpenPort", "PortService", "port_url_paths"]

MAX_OPEN_PORTS = 64
SECRET_FILE = "ports.secret"
_TOKEN = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class OpenPort:
    """An open port as users see it: where to reach it and, unless public, its token."""

    sandbox_id: str
    port: int
    public: bool
    url: str
    path_url: str
    host_url: str | None
    token: str | None
    created_at: float


@dataclass(frozen=True)
class InboundTarget:
    """Where the daemon connects to reach a sandbox's port (its slot address on the host)."""

    sandbox_id: str
    address: str
    port: int


def port_url_paths(sandbox_id: str, port: int) -> str:
    """The path prefix of a port's path route (ends in ``/``)."""
    return f"/sandboxes/{sandbox_id}/ports/{port}/"


def _load_secret(data_dir: Path) -> bytes:
    return load_or_make_key(data_dir / SECRET_FILE)


class PortService:
    """Opens, lists and closes inbound ports; checks credentials; resolves targets.
    All methods run on the daemon's event loop; the store is the only state."""

    def __init__(self, sandboxes: SandboxService, wakes: WakeService, activity: Activity) -> None:
        self.sb = sandboxes
        self.wakes = wakes
        self._activity = activity
        self.db = sandboxes.db
        self.settings = sandboxes.settings
        self._secret: bytes | None = None
        # The tasks serving connections to each open port (``connection``), cancelled at close.
        self._connections: dict[tuple[str, int], set[asyncio.Task[Any]]] = {}

    # ------------------------------------------------------------------------ managing ports
    def open(self, sandbox_id: str, port: int, *, public: bool = False) -> OpenPort:
        """Open ``port`` of the sandbox (again: keeps its token, changes ``public``)."""
        _check_port(port)
        record = self.sb.get(sandbox_id)
        if record.state not in LIVE_STATES:
            raise StateConflict(
                f"cannot open port {port} of sandbox {sandbox_id} in state {record.state}"
            )
        existing = self.db.ports.get(sandbox_id, port)
        if existing is None and len(self.db.ports.list(sandbox_id)) >= MAX_OPEN_PORTS:
            raise InvalidRequest(
                f"sandbox {sandbox_id} has {MAX_OPEN_PORTS} open ports, the most it may have; "
                "close one first (corral port close)"
            )
        opened = SandboxPortRecord(
            sandbox_id,
            port,
            public,
            existing.nonce if existing else secrets.token_hex(16),
            existing.created_at if existing else time.time(),
        )
        self.db.ports.put(opened)
        return self._describe(opened)

    def list(self, sandbox_id: str) -> list[OpenPort]:
        """The open ports of a live sandbox (an ended one has none: they closed with it)."""
        if self.sb.get(sandbox_id).state not in LIVE_STATES:
            return []
        return [self._describe(r) for r in self.db.ports.list(sandbox_id)]

    def close(self, sandbox_id: str, port: int) -> None:
        self.sb.get(sandbox_id)
        if not self.db.ports.delete(sandbox_id, port):
            raise NotFound(f"port {port} of sandbox {sandbox_id} is not open")
        for task in list(self._connections.get((sandbox_id, port), ())):
            task.cancel()

    # ------------------------------------------------------------------------ inbound traffic
    def check_access(self, sandbox_id: str, port: int, token: str | None) -> SandboxPortRecord:
        """The open port that ``token`` (None: none presented) may reach, or NotFound (no such
        live sandbox or port not open), Unauthorized (no token) or Forbidden (wrong token)."""
        record = self.db.sandboxes.get(sandbox_id)
        opened = self.db.ports.get(sandbox_id, port) if record else None
        if record is None or record.state not in LIVE_STATES or opened is None:
            raise NotFound(
                f"port {port} of sandbox {sandbox_id} is not open "
                f"(open it with: corral port open {sandbox_id} {port})"
            )
        if opened.public:
            return opened
        if not token:
            raise Unauthorized(
                f"port {port} of sandbox {sandbox_id} needs its access token (header "
                "X-Corral-Token, query parameter corral_token, or the cookie they set)"
            )
        if not (_TOKEN.match(token) and hmac.compare_digest(token, self._token(opened))):
            raise Forbidden(f"wrong access token for port {port} of sandbox {sandbox_id}")
        return opened

    async def resolve_inbound(self, sandbox_id: str, port: int) -> InboundTarget:
        """Where to connect for ``port`` of the sandbox, waking it first when it is parked and
        has auto-wake. Raises StateConflict when it is parked without auto-wake or not live,
        SandboxUnavailable when it is running but has no link yet."""
        _check_port(port)
        record = self.sb.get(sandbox_id)
        if record.state == SandboxState.PARKED and record.auto_wake:
            record = await self.wakes.wake(sandbox_id)
        if record.state == SandboxState.PARKED:
            raise StateConflict(
                f"sandbox {sandbox_id} is parked and has no auto-wake: wake it first "
                f"(corral wake {sandbox_id})"
            )
        if record.state != SandboxState.RUNNING:
            raise StateConflict(
                f"cannot reach port {port} of sandbox {sandbox_id} in state {record.state}"
            )
        address = self.sb.live.slot_address_of(sandbox_id)
        if address is None:
            raise SandboxUnavailable(f"sandbox {sandbox_id} has no network link yet; try again")
        await self.sb.thaw(sandbox_id)  # before the connection is made
        return InboundTarget(sandbox_id, address, port)

    @contextmanager
    def activity(self, sandbox_id: str) -> Iterator[None]:
        """Count an inbound connection as activity for as long as it is open."""
        with self._activity.busy(sandbox_id):
            yield

    @contextmanager
    def connection(self, sandbox_id: str, port: int) -> Iterator[None]:
        """Hold a connection to an open port for the current task: counted as activity while it
        is open, and the task cancelled if the port is closed meanwhile."""
        task = asyncio.current_task()
        key = (sandbox_id, port)
        tasks = self._connections.setdefault(key, set())
        if task is not None:
            tasks.add(task)
        try:
            with self._activity.busy(sandbox_id):
                yield
        finally:
            if task is not None:
                tasks.discard(task)
            if not tasks:
                self._connections.pop(key, None)

    # ------------------------------------------------------------------------ helpers
    def _describe(self, record: SandboxPortRecord) -> OpenPort:
        base = self.settings.base_url
        path_url = base + port_url_paths(record.sandbox_id, record.port)
        domain = self.settings.inbound_domain
        host_url = None
        if domain is not None:
            scheme, _, rest = base.partition("://")
            authority = rest.split("/", 1)[0]
            _host, colon, port_part = authority.rpartition(":")
            port_suffix = f":{port_part}" if colon and port_part.isdigit() else ""
            host_url = f"{scheme}://{record.port}-{record.sandbox_id}.{domain}{port_suffix}/"
        return OpenPort(
            sandbox_id=record.sandbox_id,
            port=record.port,
            public=record.public,
            url=host_url or path_url,
            path_url=path_url,
            host_url=host_url,
            token=None if record.public else self._token(record),
            created_at=record.created_at,
        )

    def _token(self, record: SandboxPortRecord) -> str:
        if self._secret is None:
            self._secret = _load_secret(self.settings.data_dir)
        message = f"{record.sandbox_id}:{record.port}:{record.nonce}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()


def _check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise InvalidRequest(f"port {port} is out of range 1-65535")
