"""Crash points: named places in park, wake, fork and snapshot where the crash tests make the
daemon die as SIGKILL would (``CORRAL_CRASH_AT``), to prove that reconciliation settles every
sandbox. Inert unless the setting names the step."""

from __future__ import annotations

import logging
import os
import signal

from corral.config import Settings

log = logging.getLogger("corral.crash")


def crash_point(settings: Settings, step: str) -> None:
    """Crash tests only: die here, as SIGKILL would, when told to (CORRAL_CRASH_AT)."""
    if settings.crash_at == step:
        log.warning("crash point %s reached: killing the daemon", step)
        os.kill(os.getpid(), signal.SIGKILL)
