"""Building templates from Python, in the style of E2B's template builder::

    from corral import Template

    t = (
        Template()
        .from_image("base")  # a template, docker-archive:PATH, oci:PATH, registry:H/N:T
        .run_cmd("pip install requests")
        .set_envs({"A": "1"})
        .set_workdir("/app")
        .copy("./src", "/app/src")  # a local path: packed and uploaded with the build
    )
    info = Template.build(t, name="py", on_log=lambda e: print(e.text, end=""))

The daemon reads no path of its host for a build: the builder packs the build context (a
Dockerfile's dir, less its `.dockerignore`, and every `copy()` source) into a tar and uploads it,
and uploads a local `docker-archive:PATH` file or `oci:PATH[:TAG]` dir given to `from_image`
(relative paths are relative to the current dir). A `docker-archive:`/`oci:` path that does not
exist here is sent as it is: the daemon takes it only from inside its admin's import dir.

`AsyncTemplate` is the same builder with an async `build`. A build streams `BuildEvent`s; a failed
build raises `BuildError`, whose message names the failing step and its exit code.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread

from corral.sdk._build_context import COPY_DIR, pack
from corral.sdk.client import AsyncClient
from corral.sdk.errors import CorralError
from corral.sdk.models import TemplateInfo

__all__ = ["AsyncTemplate", "BuildError", "BuildEvent", "Template"]

Self = TypeVar("Self", bound="_TemplateSpec")


class BuildError(CorralError):
    """A template build failed; `step` and `exit_code` say where and how (None if unknown)."""

    def __init__(self, message: str, *, step: int | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.step = step
        self.exit_code = exit_code


@dataclass(frozen=True)
class BuildEvent:
    """One build event: `type` is start, step, output, step_done, done or failed."""

    type: str
    index: int | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """A human line for the event (output data as it came, steps as `[i/n] STEP`)."""
        r = self.raw
        if self.type == "output":
            return str(r.get("data", ""))
        if self.type == "step":
            return f"[{r.get('index')}/{r.get('total')}] {r.get('step')}\n"
        if self.type == "step_done" and r.get("exit_code"):
            return f"  exit code {r.get('exit_code')}\n"
        if self.type == "start":
            return f"building {r.get('template')} from {r.get('source')} ({r.get('steps')} steps)\n"
        if self.type == "done":
            return f"built {(r.get('template') or {}).get('name')} in {r.get('seconds')} s\n"
        if self.type == "failed":
            return f"build failed: {r.get('error')}\n"
        return ""

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> BuildEvent:
        return cls(type=str(data.get("type", "")), index=data.get("index"), raw=dict(data))


class _TemplateSpec:
    """The builder state shared by `Template` and `AsyncTemplate` (no I/O)."""

    def __init__(self) -> None:
        self._base: str | None = None
        self._steps: list[dict[str, Any]] = []
        self._dockerfile: str | None = None
        self._context: Path | None = None
        self._copies: list[tuple[Path, str]] = []
        self._options: dict[str, Any] = {}

    def from_image(self: Self, image: str) -> Self:
        """Start from a template name or an image source (docker-archive:PATH, oci:PATH[:TAG]
        — local paths, uploaded by `build` — or registry:HOST/NAME:TAG)."""
        self._base = image
        return self

    def from_template(self: Self, name: str) -> Self:
        return self.from_image(name)

    def from_registry(
        self: Self, ref: str, *, username: str | None = None, password: str | None = None
    ) -> Self:
        self._base = f"registry:{ref}"
        if username is not None:
            self._options["creds"] = f"{username}:{password or ''}"
        return self

    def from_dockerfile(self: Self, path: str | Path) -> Self:
        """Take FROM and the steps of a Dockerfile; COPY sources are relative to its dir (the
        build context, uploaded by `build`)."""
        dockerfile = Path(path).resolve()
        self._dockerfile = dockerfile.read_text()
        self._context = self._context or dockerfile.parent
        return self

    def set_context(self: Self, directory: str | Path) -> Self:
        """Use `directory` (a local dir, uploaded by `build`) as the build context."""
        self._context = Path(directory).resolve()
        return self

    def run_cmd(self: Self, command: str | Iterable[str]) -> Self:
        value = command if isinstance(command, str) else list(command)
        self._steps.append({"kind": "run", "value": value})
        return self

    def set_envs(self: Self, envs: Mapping[str, str]) -> Self:
        self._steps.append({"kind": "env", "value": dict(envs)})
        return self

    def set_workdir(self: Self, path: str) -> Self:
        self._steps.append({"kind": "workdir", "value": path})
        return self

    def set_user(self: Self, user: str) -> Self:
        self._steps.append({"kind": "user", "value": user})
        return self

    def copy(self: Self, src: str | Path, dst: str) -> Self:
        """Copy a local file or dir to `dst` in the image (packed into the uploaded context)."""
        local = Path(os.path.abspath(src))
        arcname = f"{COPY_DIR}/{len(self._copies)}/{local.name or 'root'}"
        self._copies.append((local, arcname))
        self._steps.append({"kind": "copy", "value": {"src": [arcname], "dst": dst}})
        return self

    def set_start_cmd(self: Self, command: str | Iterable[str]) -> Self:
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        self._options["start_cmd"] = argv
        return self

    def with_recipe(self: Self, name: str) -> Self:
        """Start from a recipe: its readable RUN steps (before this template's own) and its
        defaults, applied by the daemon (`client.recipes()` lists them, `src/corral/recipes/`
        holds them): `dev` gives git, build tools, Node.js and the `claude` and `codex` CLIs;
        `code-interpreter` makes `sandbox.run_code` work in the template's sandboxes. An
        unknown name is refused by the build, naming the known ones."""
        recipes = self._options.setdefault("recipes", [])
        if name not in recipes:
            recipes.append(name)
        return self

    def set_insecure(self: Self, insecure: bool = True) -> Self:
        """Allow a plain-HTTP or unverified-TLS registry for the pull (loopback ones too: TLS is
        never skipped unasked)."""
        self._options["insecure"] = insecure
        return self

    def body(self, name: str, **options: Any) -> dict[str, Any]:
        """The `POST /v1/templates` body for building this as `name`."""
        body: dict[str, Any] = {"name": name, "steps": list(self._steps), **self._options}
        if self._base is not None:
            body["base"] = self._base
        if self._dockerfile is not None:
            body["dockerfile"] = self._dockerfile
        body.update({k: v for k, v in options.items() if v is not None and v is not False})
        return body

    async def build_with(
        self,
        client: AsyncClient,
        name: str,
        *,
        on_log: Callable[[BuildEvent], Any] | None = None,
        **options: Any,
    ) -> TemplateInfo:
        """Build on `client`, calling `on_log` with every event; raises `BuildError`."""
        body = self.body(name, **options)
        body.update(await self._upload(client, name))
        async for raw in client.build_events(body):
            event = BuildEvent.from_wire(raw)
            if on_log is not None:
                on_log(event)
            if event.type == "done":
                return TemplateInfo.from_wire(raw.get("template") or {"name": name})
            if event.type == "failed":
                raise BuildError(
                    str(raw.get("error", "the build failed")),
                    step=raw.get("index"),
                    exit_code=raw.get("exit_code"),
                )
        raise BuildError(f"the build of {name!r} ended without a result (daemon restarted?)")

    async def _upload(self, client: AsyncClient, name: str) -> dict[str, Any]:
        """Upload the build context and a local image source; the body fields that name them."""
        fields: dict[str, Any] = {}
        if self._context is not None or self._copies:
            tar = await anyio.to_thread.run_sync(pack, self._context, list(self._copies))
            with tar:
                label = f"{name}-context.tar"
                fields["context"] = await client.upload_build_input("context", tar, label)
        local = _local_image(self._base)
        if local is not None:
            kind, path, tag = local
            if kind == "docker-archive":
                upload_id = await client.upload_build_input(kind, path, path.name)
            else:
                tar = await anyio.to_thread.run_sync(pack, path)
                with tar:
                    upload_id = await client.upload_build_input(kind, tar, path.name)
            fields["base"] = f"upload:{upload_id}" + (f":{tag}" if tag else "")
        return fields


def _local_image(base: str | None) -> tuple[str, Path, str] | None:
    """(kind, path, tag) of a `docker-archive:`/`oci:` source that names a path on this machine;
    None for anything else (a path that is not here is left to the daemon's import dir)."""
    for kind in ("docker-archive", "oci"):
        if base is None or not base.startswith(kind + ":"):
            continue
        ref = base[len(kind) + 1 :]
        path, tag = ref, ""
        if kind == "oci" and not os.path.exists(ref) and ":" in ref:
            path, tag = ref.rsplit(":", 1)
        if os.path.exists(path):
            return kind, Path(path).resolve(), tag
    return None


class AsyncTemplate(_TemplateSpec):
    """The template builder with an async `build`."""

    @staticmethod
    async def build(
        template: _TemplateSpec,
        name: str,
        *,
        on_log: Callable[[BuildEvent], Any] | None = None,
        client: AsyncClient | None = None,
        **options: Any,
    ) -> TemplateInfo:
        """Build `template` as `name` (options: cpu, memory_mib, disk_mib, max_cpu,
        max_memory_mib, max_disk_mib, tags, warmup, warm, pool)."""
        if client is not None:
            return await template.build_with(client, name, on_log=on_log, **options)
        async with AsyncClient() as own:
            return await template.build_with(own, name, on_log=on_log, **options)


class Template(_TemplateSpec):
    """The template builder with a synchronous `build`."""

    @staticmethod
    def build(
        template: _TemplateSpec,
        name: str,
        *,
        on_log: Callable[[BuildEvent], Any] | None = None,
        client: Any = None,
        **options: Any,
    ) -> TemplateInfo:
        """Build `template` as `name`; `client` is a sync `corral.Client` (default: a new one)."""
        from corral.sdk._portal import portal

        async def run() -> TemplateInfo:
            inner: AsyncClient | None = getattr(client, "_async", None)
            if inner is not None:
                return await template.build_with(inner, name, on_log=on_log, **options)
            async with AsyncClient() as own:
                return await template.build_with(own, name, on_log=on_log, **options)

        return portal().call(run())
