"""`AsyncClient`: the connection to one daemon and the workspace-wide calls.

Workspace calls (capacity, templates, listing) live here; everything about one sandbox lives on
`AsyncSandbox`. Several sandbox handles made through one client share its connection pool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx
from typing_extensions import Unpack

from corral.sdk._http import DEFAULT_TIMEOUT, HTTPSession, encode_query
from corral.sdk._transfer import Destination, Source, download, upload
from corral.sdk.config import resolve_api_key, resolve_url
from corral.sdk.models import (
    Capacity,
    ImportResult,
    SandboxInfo,
    SandboxOptions,
    SecretAuditEntry,
    SecretInfo,
    SnapshotInfo,
    TemplateInfo,
    TrustedKey,
)
from corral.sdk.sandbox import AsyncSandbox
from corral.sdk.services import AsyncServices
from corral.sdk.workspace import AsyncKeys, AsyncPolicy, AuditEntry, Event, audit, events

__all__ = ["AsyncClient"]


class AsyncClient:
    """Talks to the daemon at `url` with `api_key` (see `corral.sdk.config` for the defaults).

    `transport` replaces the network, e.g. with `httpx.MockTransport` or
    `corral.sdk.testing.FakeDaemon().transport` in tests.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
    ) -> None:
        self.url = resolve_url(url)
        self.session = HTTPSession(
            self.url, resolve_api_key(api_key), transport=transport, timeout=timeout
        )
        self.keys = AsyncKeys(self.session)
        self.policy = AsyncPolicy(self.session)
        self.services = AsyncServices(self.session)

    def __repr__(self) -> str:
        return f"<AsyncClient {self.url}>"

    async def aclose(self) -> None:
        await self.session.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- workspace ----------------------------------------------------------------------------

    async def health(self) -> bool:
        answer = await self.session.json("GET", "/healthz")
        return bool((answer or {}).get("ok", False))

    async def capacity(self) -> Capacity:
        return Capacity.from_wire(await self.session.json("GET", "/v1/capacity"))

    async def audit(
        self,
        *,
        key: str | None = None,
        sandbox: str | None = None,
        since: float | None = None,
        limit: int = 1000,
    ) -> list[AuditEntry]:
        """Audit log entries, oldest first (admin): filtered by key name, sandbox id, time."""
        return await audit(self.session, key=key, sandbox=sandbox, since=since, limit=limit)

    def events(self) -> AsyncIterator[Event]:
        """State changes as they happen (server-sent events), those this key may see."""
        return events(self.session)

    async def metrics_text(self) -> str:
        """The Prometheus exposition text of `GET /metrics` (admin)."""
        return (await self.session.request("GET", "/metrics")).text

    async def console_login_link(self) -> str:
        """A link that logs a browser into the web console once, as this client's key (and
        role), within a couple of minutes."""
        answer = await self.session.json("POST", "/v1/console/login-tokens")
        return self.url.rstrip("/") + str(answer["path"])

    async def templates(self) -> list[TemplateInfo]:
        answer = await self.session.json("GET", "/v1/templates")
        return [TemplateInfo.from_wire(item) for item in answer.get("templates", [])]

    async def get_template(self, name: str) -> TemplateInfo:
        return TemplateInfo.from_wire(await self.session.json("GET", f"/v1/templates/{name}"))

    async def recipes(self) -> list[dict[str, Any]]:
        """The recipes a build can start from (`Template().with_recipe(NAME)`): name,
        description, steps, defaults."""
        answer = await self.session.json("GET", "/v1/recipes")
        return list(answer.get("recipes", []))

    async def delete_template(self, name: str) -> None:
        """Remove a template (one tag); refused while sandboxes or snapshots use it."""
        await self.session.json("DELETE", f"/v1/templates/{name}")

    async def upload_build_input(self, kind: str, source: Source, name: str | None = None) -> str:
        """Upload what a build reads (`kind`: context or oci, a tar; docker-archive, the archive
        file), streamed; returns the upload's id, for one build (`context` / `base: upload:ID`)."""
        query = encode_query({"kind": kind, "name": name})
        answer = await upload(self.session, f"/v1/templates/uploads?{query}", source)
        return str(answer["id"])

    async def build_events(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """`POST /v1/templates`: the build's events as they come (see `corral.sdk.templates`)."""
        async with self.session.stream("POST", "/v1/templates", json_body=body) as response:
            async for event in self.session.iter_json_lines(response):
                yield event

    async def template_logs(self, name: str) -> AsyncIterator[dict[str, Any]]:
        """The events of the template's last build."""
        async with self.session.stream("GET", f"/v1/templates/{name}/logs") as response:
            async for event in self.session.iter_json_lines(response):
                yield event

    async def create_template(
        self,
        name: str,
        *,
        image: str | None = None,
        warmup: str | None = None,
        warm: bool = False,
        cpu: float | None = None,
        memory_mib: int | None = None,
    ) -> TemplateInfo:
        """Build a template from `image` (a template name or image source) and wait for it;
        raises `corral.sdk.templates.BuildError` if the build fails."""
        from corral.sdk.templates import AsyncTemplate

        spec = AsyncTemplate().from_image(image or "base")
        return await spec.build_with(
            self, name, warmup=warmup, warm=warm, cpu=cpu, memory_mib=memory_mib
        )

    # -- sandboxes ----------------------------------------------------------------------------

    async def list_sandboxes(
        self,
        state: str | None = None,
        metadata: Mapping[str, str] | None = None,
        *,
        all: bool = False,
    ) -> list[SandboxInfo]:
        """Live sandboxes (creating, running, parked, failed); with ``all`` also the ended ones
        whose records the daemon still keeps; with ``state`` those in that state."""
        params: list[tuple[str, Any]] = []
        if state:
            params.append(("state", state))
        if all:
            params.append(("all", "true"))
        params.extend(("metadata", f"{key}={value}") for key, value in (metadata or {}).items())
        answer = await self.session.json("GET", "/v1/sandboxes", params=params)
        return [SandboxInfo.from_wire(item) for item in answer.get("sandboxes", [])]

    async def create_sandbox_info(
        self, template: str = "base", **options: Unpack[SandboxOptions]
    ) -> SandboxInfo:
        body: dict[str, Any] = {"template": template}
        for key, value in options.items():
            if value is None or value is False or value == {} or value == []:
                continue  # the daemon's default
            if isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, Sequence) and not isinstance(value, str):
                value = list(value)
            body[key] = value
        return SandboxInfo.from_wire(
            await self.session.json("POST", "/v1/sandboxes", json_body=body)
        )

    async def create_sandbox(
        self, template: str = "base", **options: Unpack[SandboxOptions]
    ) -> AsyncSandbox:
        """A new sandbox sharing this client (closing the sandbox handle leaves the client open).
        See `SandboxOptions` for the options."""
        info = await self.create_sandbox_info(template, **options)
        return AsyncSandbox(self, info)

    async def get_sandbox_info(self, sandbox_id: str) -> SandboxInfo:
        return SandboxInfo.from_wire(await self.session.json("GET", f"/v1/sandboxes/{sandbox_id}"))

    async def connect(self, sandbox_id: str) -> AsyncSandbox:
        """A handle on an existing sandbox (raises `NotFound` if there is none)."""
        return AsyncSandbox(self, await self.get_sandbox_info(sandbox_id))

    def sandbox(self, sandbox_id: str) -> AsyncSandbox:
        """A handle on sandbox `sandbox_id` without asking the daemon (no round trip)."""
        return AsyncSandbox(self, SandboxInfo(id=sandbox_id, state="unknown"))

    # -- snapshots and transfer ---------------------------------------------------------------

    async def snapshots(self) -> list[SnapshotInfo]:
        answer = await self.session.json("GET", "/v1/snapshots")
        return [SnapshotInfo.from_wire(item) for item in answer.get("snapshots", [])]

    async def get_snapshot(self, name: str) -> SnapshotInfo:
        return SnapshotInfo.from_wire(await self.session.json("GET", _snapshot_path(name)))

    async def remove_snapshot(self, name: str) -> None:
        """Delete a snapshot (raises `NotFound` if there is none)."""
        await self.session.request("DELETE", _snapshot_path(name))

    async def export_sandbox(self, sandbox_id: str, destination: Destination) -> int:
        """Write parked sandbox `sandbox_id` as one checksummed file; returns the bytes."""
        return await download(
            self.session, f"/v1/sandboxes/{quote(sandbox_id, safe='')}/export", destination
        )

    async def export_snapshot(self, name: str, destination: Destination) -> int:
        """Write snapshot `name` as one checksummed file; returns the bytes."""
        return await download(self.session, f"{_snapshot_path(name)}/export", destination)

    async def import_file(self, source: Source, *, fs_only: bool = False) -> ImportResult:
        """Bring in a file made by an export (on this host or another), streamed. The daemon
        checks the signature and every checksum and registers the parked sandbox or snapshot
        only if all match. An export not signed by a trusted key raises `UntrustedExport`;
        with `fs_only` it brings in only what holds no memory image (an fs snapshot)."""
        url = "/v1/import?fs_only=true" if fs_only else "/v1/import"
        return ImportResult.from_wire(await upload(self.session, url, source))

    # -- trusted signers of exports (admin) ---------------------------------------------------

    async def workspace_public_key(self) -> str:
        """This workspace's public key, for `trust_key` on the hosts that import its exports."""
        answer = await self.session.json("GET", "/v1/trust/self")
        return str(answer["public_key"])

    async def trusted_keys(self) -> list[TrustedKey]:
        answer = await self.session.json("GET", "/v1/trust")
        return [TrustedKey.from_wire(item) for item in answer.get("keys", [])]

    async def trust_key(self, name: str, public_key: str) -> TrustedKey:
        """Trust exports signed by `public_key` (`ed25519:...` or a PEM public key) as `name`."""
        body = {"name": name, "public_key": public_key}
        return TrustedKey.from_wire(await self.session.json("POST", "/v1/trust", json_body=body))

    async def untrust_key(self, name: str) -> None:
        await self.session.request("DELETE", f"/v1/trust/{quote(name, safe='')}")

    # -- brokered secrets (admin; docs/secrets.md) ---------------------------------------------

    async def secrets(self) -> list[SecretInfo]:
        """The workspace's secrets: names, presets, hosts, last use; never values."""
        answer = await self.session.json("GET", "/v1/secrets")
        return [SecretInfo.from_wire(item) for item in answer.get("secrets", [])]

    async def set_secret(
        self,
        name: str,
        value: str,
        *,
        preset: str = "http",
        hosts: Sequence[str] | None = None,
        header: str | None = None,
        scheme: str | None = None,
        query: bool | None = None,
        body: bool | None = None,
    ) -> SecretInfo:
        """Store (or replace) secret `name`; `preset` is github, openai, anthropic, http (needs
        `hosts`) or aws (`value` is `KEY_ID:SECRET_KEY`)."""
        payload: dict[str, Any] = {"value": value, "preset": preset}
        for key, given in (
            ("hosts", list(hosts) if hosts is not None else None),
            ("header", header),
            ("scheme", scheme),
            ("query", query),
            ("body", body),
        ):
            if given is not None:
                payload[key] = given
        answer = await self.session.json("PUT", _secret_path(name), json_body=payload)
        return SecretInfo.from_wire(answer)

    async def rotate_secret(self, name: str, value: str) -> SecretInfo:
        """A new value; running sandboxes bound to it use it from their next request."""
        answer = await self.session.json(
            "POST", _secret_path(name) + "/rotate", json_body={"value": value}
        )
        return SecretInfo.from_wire(answer)

    async def remove_secret(self, name: str) -> None:
        """Delete a secret; no sandbox gets it from now on."""
        await self.session.request("DELETE", _secret_path(name))

    async def revoke_secret(self, sandbox_id: str, name: str) -> None:
        """Stop giving secret `name` to one sandbox (its placeholder stays, inert)."""
        await self.session.request(
            "DELETE", f"/v1/sandboxes/{sandbox_id}/secrets/{quote(name, safe='')}"
        )

    async def secret_log(
        self, secret: str | None = None, sandbox_id: str | None = None, limit: int = 100
    ) -> list[SecretAuditEntry]:
        """The newest injections (oldest first), by secret and/or sandbox."""
        params: list[tuple[str, Any]] = [("limit", limit)]
        if secret:
            params.append(("secret", secret))
        if sandbox_id:
            params.append(("sandbox_id", sandbox_id))
        answer = await self.session.json("GET", "/v1/secrets/log", params=params)
        return [SecretAuditEntry.from_wire(item) for item in answer.get("entries", [])]


def _secret_path(name: str) -> str:
    return f"/v1/secrets/{quote(name, safe='')}"


def _snapshot_path(name: str) -> str:
    return f"/v1/snapshots/{quote(name, safe='')}"
