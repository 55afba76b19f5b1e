"""The steps of a build: how each kind of step changes the image config or runs in the build
sandbox (RUN exec'd by its agent with its output streamed as build events, COPY streamed through
its file API, WORKDIR made by it). A failed step raises BuildFailed naming the step."""

from __future__ import annotations

import base64
import dataclasses
import os
from typing import Any

from corral.images.cas import ImageConfig
from corral.images.steps import BuildStep
from corral.runtime.agent_client import AgentClient, AgentError
from corral.service.builds.copy import CopyFailed, copy_sources
from corral.service.builds.log import BuildHandle
from corral.service.builds.plan import BuildFailed, BuildPlan
from corral.service.builds.sandbox import BuildSandbox

__all__ = ["apply_step"]


async def apply_step(
    step: BuildStep,
    config: ImageConfig,
    sandbox: BuildSandbox | None,
    plan: BuildPlan,
    handle: BuildHandle,
    index: int,
) -> tuple[ImageConfig, int]:
    """Apply one build step: config steps change ``config``; filesystem steps (WORKDIR, COPY,
    RUN, a recipe's file) run in the build sandbox, booted on the first. Returns the new config
    and the step's exit code."""
    kind, value = step.kind, step.value
    if kind == "env":
        return dataclasses.replace(config, env={**config.env, **value}), 0  # type: ignore[dict-item]
    if kind == "label":
        return dataclasses.replace(config, labels={**config.labels, **value}), 0  # type: ignore[dict-item]
    if kind == "user":
        return dataclasses.replace(config, user=str(value)), 0
    if kind in ("cmd", "entrypoint"):
        return dataclasses.replace(config, **{kind: list(value)}), 0  # type: ignore[call-overload]
    assert sandbox is not None
    client = await sandbox.agent()
    if kind == "workdir":
        path = os.path.join(config.workdir or "/", str(value))
        await client.mkdir(path, parents=True)
        return dataclasses.replace(config, workdir=path), 0
    if kind == "copy":
        await _copy(client, step, config, plan, handle, index)
        return config, 0
    if kind == "run":
        return config, await _run(client, step, config, plan, handle, index)
    if kind == "file":  # from a recipe (service/templates/recipes.py), never from a request
        spec: dict[str, Any] = step.value  # type: ignore[assignment]
        await client.write_file(spec["path"], spec["data"], mode=spec["mode"], parents=True)
        return config, 0
    raise BuildFailed(f"step {index}: unknown step kind {kind!r}", index=index)


async def _run(
    client: AgentClient,
    step: BuildStep,
    config: ImageConfig,
    plan: BuildPlan,
    handle: BuildHandle,
    index: int,
) -> int:
    spec: dict[str, Any] = {
        "env": {**plan.build_args, **step.build_env, **config.env},
        "cwd": config.workdir or "/",
        "user": config.user,
    }
    if isinstance(step.value, list):
        spec["cmd"] = step.value
    else:
        spec["shell"] = str(step.value)
    stream = client.stream_process(spec)
    exit_code: int | None = None
    try:
        async for event in stream:
            kind = event.get("type")
            if kind in ("stdout", "stderr"):
                data = base64.b64decode(event.get("data") or "").decode(errors="replace")
                await handle.emit({"type": "output", "index": index, "stream": kind, "data": data})
            elif kind == "exit":
                exit_code = event.get("exit_code")
                if exit_code is None:
                    exit_code = 128 + int(event.get("signal") or 9)
    except AgentError as exc:
        if exc.code == "exec_failed":
            raise BuildFailed(
                f"step {index} ({step.describe()}): {exc}", index=index, exit_code=127
            ) from exc
        raise
    finally:
        await stream.aclose()
    if exit_code is None:
        raise BuildFailed(f"step {index} ({step.describe()}): the process vanished", index=index)
    return int(exit_code)


async def _copy(
    client: AgentClient,
    step: BuildStep,
    config: ImageConfig,
    plan: BuildPlan,
    handle: BuildHandle,
    index: int,
) -> None:
    value: dict[str, Any] = step.value  # type: ignore[assignment]
    dst = os.path.join(config.workdir or "/", str(value["dst"]))

    async def say(text: str) -> None:
        await handle.emit({"type": "output", "index": index, "stream": "info", "data": text + "\n"})

    try:
        await copy_sources(client, value, plan.context, dst, say)
    except CopyFailed as exc:
        raise BuildFailed(
            f"step {index} ({step.describe()}): {exc}", index=index, exit_code=1
        ) from exc
