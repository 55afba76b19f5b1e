"""The web console, served by the daemon at ``/console`` (no Node.js at run time).

- ``session``: logging in (a one-time token from ``corral console``, or a pasted API key) for an
  ``HttpOnly``, ``SameSite=Strict`` session cookie; the session then authenticates the console's
  calls to the ordinary ``/v1`` API (``api/deps.py`` checks its CSRF token and origin);
- ``terminal``: a sandbox's terminal over a WebSocket (a PTY process in the sandbox; reattach by
  pid after a reload);
- ``static``: the built front end (``console/`` in the repository, built by ``scripts/setup``
  into this package's ``static/`` directory).

``install(app)`` mounts all three.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from corral.console import session, static, terminal

__all__ = ["install"]


def install(app: FastAPI, static_dir: Path | None = None) -> None:
    app.include_router(session.router)
    app.include_router(terminal.router)
    app.include_router(static.router(static_dir or static.BUILT))
