"""``corral serve``: run the daemon in the foreground with uvicorn.

SIGINT/SIGTERM shut it down gracefully: in-flight requests finish, running sandboxes are left
running (they are re-adopted at the next start), and the store is closed.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import uvicorn

from corral.api.app import create_app
from corral.api.front import front_protocol
from corral.api.http_bounds import bounded_protocol
from corral.api.inbound import InboundProxy
from corral.at_rest import DAEMON_UMASK
from corral.config import Settings
from corral.daemon import open_workspace
from corral.e2b.mount import ENVD_PORT


class JsonFormatter(logging.Formatter):
    """One JSON object per log line: time, level, logger, message (and exception)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(level: str) -> None:
    """corral's own loggers at ``level``; libraries (uvicorn, httpx, pyroute2 …) at warning."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("corral").setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.error").setLevel(logging.INFO)


def serve(data_dir: Path | str | None = None, listen: str | None = None) -> None:
    # Everything the daemon creates from here on is root's alone (see corral.at_rest).
    os.umask(DAEMON_UMASK)
    overrides: dict[str, object] = {}
    if data_dir is not None:
        overrides["data_dir"] = Path(data_dir)
    if listen is not None:
        overrides["listen"] = listen
    settings = Settings(**overrides).resolved()  # type: ignore[arg-type]
    configure_logging(settings.log_level)
    log = logging.getLogger("corral.daemon")
    started = time.monotonic()
    workspace = open_workspace(settings)
    max_head = settings.http_max_head_kib * 1024
    # The E2B front serves envd's host names (49983-ID.domain) itself.
    inbound = InboundProxy(workspace.ports, app_ports=frozenset({ENVD_PORT}), max_head=max_head)
    app = create_app(workspace, closing=(inbound.close,))
    log.info(
        "corral starting on http://%s (data dir %s, admin key in %s)",
        settings.listen,
        settings.data_dir,
        settings.admin_key_path,
    )
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
        # Every connection's first head picks the inbound proxy or the app (api/front.py);
        # the app's protocol is httptools (~0.3 ms less per request than h11) when installed.
        http=front_protocol(inbound, bounded_protocol(max_head), max_head=max_head),
        limit_concurrency=settings.http_limit_concurrency,
        timeout_keep_alive=settings.http_timeout_keep_alive,
        # The request head's bound under h11 (api/http_bounds.py bounds httptools).
        h11_max_incomplete_event_size=max_head,
        backlog=settings.http_backlog,
    )
    server = uvicorn.Server(config)
    server.run()
    log.info("corral stopped after %.0f s; sandboxes left running", time.monotonic() - started)
