"""The daemon's links to the agents of booted sandboxes: connecting to a just-booted agent and
waiting for it while its boot progresses, rekeying a restored one, and translating what an agent
reports into the service's errors.

Invariants:
- a boot's agent is waited for as long as the sandbox is alive and progressing (it used CPU in
  the last ``agent_ready_timeout``), up to ``agent_ready_limit``: a boot starved by load is
  slow, not failed; one that stopped or used no CPU for a whole window is stuck and fails;
- a restored agent holds the key of the one that was checkpointed: ``connect`` gives it its own
  key, boot id and randomness before anything else is asked of it (the rekey, retried until the
  agent answers, is also the readiness check);
- ``translate_agent_error`` maps what a sandbox's agent reports to the service's error tree: the
  agent runs inside the sandbox and is not trusted, so only the codes it may use pass through.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable

from corral.config import Settings
from corral.network.base import Slot
from corral.runtime.agent_client import AgentClient, AgentError, AgentUnavailable
from corral.runtime.base import Runtime, RuntimeStatus
from corral.service.errors import (
    CorralError,
    ExecFailed,
    InvalidRequest,
    NotFound,
    OperationFailed,
    StateConflict,
    TooLarge,
)
from corral.timing import phase

__all__ = ["AGENT_CODES", "AgentLinks", "ConnectAgent", "translate_agent_error"]

log = logging.getLogger("corral.sandboxes")

ConnectAgent = Callable[[str, Slot], AgentClient]

# A booting sandbox is progressing while it uses at least this share of one CPU over a window of
# agent_ready_timeout: a boot starved at load 16 on 2 cores still gets about 12 %; a stuck
# sandbox's idle sentry uses about 2.5 %.
PROGRESS_CPU_SHARE = 0.05


class AgentLinks:
    """Makes the agent clients of booted sandboxes (``connect_agent``: by default a client of the
    slot's host address). Holds no state of its own: ``LiveSandboxes`` keeps the clients."""

    def __init__(
        self, settings: Settings, runtime: Runtime, connect_agent: ConnectAgent | None = None
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.connect_agent: ConnectAgent = connect_agent or (
            lambda _id, slot: AgentClient(slot.host_address)
        )

    async def connect(
        self, sandbox_id: str, slot: Slot, key: str, verb: str, *, rekey_to: str | None = None
    ) -> AgentClient:
        """A client of the agent just started in ``slot``, once it answers (closed on failure).
        ``key`` is the one the agent holds; with ``rekey_to`` (a restored agent, which holds the
        key of the one checkpointed) the agent is given that key, a new boot id and new
        randomness before anything else, the rekey being the readiness check too."""
        client = self.connect_agent(sandbox_id, slot)
        client.set_key(key)
        try:
            if rekey_to is None:
                with phase("agent ready"):
                    await self._await_agent(sandbox_id, verb, client.wait_ready)
            else:
                boot_id, seed = secrets.token_hex(16), secrets.token_hex(32)

                async def rekey(timeout: float) -> None:
                    await client.rekey_when_ready(
                        rekey_to, boot_id=boot_id, seed=seed, timeout=timeout
                    )

                with phase("agent rekey"):
                    await self._await_agent(sandbox_id, verb, rekey)
        except BaseException:
            await client.aclose()
            raise
        return client

    async def _await_agent(
        self, sandbox_id: str, verb: str, attempt: Callable[[float], Awaitable[object]]
    ) -> None:
        """Wait for a booted sandbox's agent to answer ``attempt`` (which waits up to the time
        it is given, raising AgentUnavailable if nothing answered) while the sandbox is alive
        and progressing: each window of ``agent_ready_timeout`` without an answer must have used
        some CPU, and the whole wait is at most ``agent_ready_limit``. Raise OperationFailed
        saying which."""
        window = self.settings.agent_ready_timeout
        limit = max(self.settings.agent_ready_limit, window)
        started = time.monotonic()
        cpu = await self._cpu_seconds(sandbox_id)
        while True:
            try:
                await attempt(min(window, limit - (time.monotonic() - started)))
                return
            except AgentUnavailable as exc:
                waited = time.monotonic() - started
                info = await self.runtime.info(sandbox_id)
                if info.status is not RuntimeStatus.RUNNING:
                    detail = f": {info.detail}" if info.detail else ""
                    raise OperationFailed(
                        f"{verb} sandbox {sandbox_id} failed: it is {info.status.value} after "
                        f"{waited:.1f} s, before its agent answered{detail}"
                    ) from exc
                if waited >= limit - 1e-3:
                    raise OperationFailed(
                        f"{verb} sandbox {sandbox_id} failed: its agent did not answer within "
                        f"{limit:g} s (agent_ready_limit) although the sandbox kept running; "
                        "its console log (corral logs) may say why"
                    ) from exc
                now = await self._cpu_seconds(sandbox_id)
                if now is None or cpu is None or now - cpu < PROGRESS_CPU_SHARE * window:
                    used = "no" if now is None or cpu is None else f"{now - cpu:.2f} s of"
                    raise OperationFailed(
                        f"{verb} sandbox {sandbox_id} failed: its boot is stuck: the agent did "
                        f"not answer within {waited:.1f} s and the sandbox used {used} CPU in "
                        f"the last {window:g} s (agent_ready_timeout)"
                    ) from exc
                log.info(
                    "sandbox %s: agent not up after %.1f s but the boot is progressing "
                    "(%.2f s of CPU in %g s): waiting on",
                    sandbox_id,
                    waited,
                    now - cpu,
                    window,
                )
                cpu = now

    async def _cpu_seconds(self, sandbox_id: str) -> float | None:
        try:
            usage = await self.runtime.usage(sandbox_id)
        except Exception:  # a sandbox whose cgroup is not readable shows no progress
            return None
        return None if usage is None else usage.cpu_seconds

    async def finish_rekey(
        self, sandbox_id: str, client: AgentClient, key: str, image_key: str
    ) -> None:
        try:
            if "boot_id" in await client.health():  # only answered in full to the right key
                return
            client.set_key(image_key)
            if "boot_id" in await client.health():
                await client.rekey(key, boot_id=secrets.token_hex(16), seed=secrets.token_hex(32))
                log.info("sandbox %s: finished the rekey an interrupted wake left", sandbox_id)
                return
        except AgentError as exc:
            log.error("sandbox %s: checking its agent key failed: %s", sandbox_id, exc)
        client.set_key(key)


# The codes a sandbox's agent may answer with (agent/errors.py). The agent runs inside the sandbox
# and is not trusted: any other code it sends is reported as the daemon's `internal`.
AGENT_CODES = frozenset(
    {
        "bad_request",
        "is_a_directory",
        "not_a_directory",
        "exists",
        "conflict",
        "not_found",
        "permission_denied",
        "no_space",
        "exec_failed",
        "too_large",
    }
)


def translate_agent_error(sandbox_id: str, exc: AgentError) -> CorralError:
    """Map an error the agent reported to the service's tree (keeping the agent's code)."""
    code = getattr(exc, "code", None) or "internal"
    message = f"sandbox {sandbox_id}: {exc}"
    if code not in AGENT_CODES:
        return OperationFailed(message)
    if code == "not_found":
        return NotFound(message)
    if code == "exec_failed":
        return ExecFailed(message)
    if code == "conflict":
        return StateConflict(message)
    if code == "too_large":
        return TooLarge(message)
    if code in {"bad_request", "is_a_directory", "not_a_directory"}:
        return InvalidRequest(message, code=code)
    return CorralError(message, code=code)  # exists, permission_denied, no_space
