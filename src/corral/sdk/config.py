"""Where the SDK finds the daemon and its API key.

Order, first hit wins: the explicit argument, then the environment (`CORRAL_URL`,
`CORRAL_API_KEY`), then the defaults of a daemon on this host (`http://127.0.0.1:7070`, and the
admin key that `corral serve` writes to its default data dir). Nothing here runs at import time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from corral.sdk.errors import ConfigurationError

__all__ = ["DEFAULT_KEY_FILE", "DEFAULT_URL", "resolve_api_key", "resolve_url"]

DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_KEY_FILE = Path("/var/lib/corral/admin.key")


def resolve_url(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The daemon's base URL, without a trailing slash."""
    env = os.environ if environ is None else environ
    url = explicit or env.get("CORRAL_URL") or DEFAULT_URL
    return url.rstrip("/")


def resolve_api_key(
    explicit: str | None = None,
    environ: Mapping[str, str] | None = None,
    key_file: Path | None = None,
) -> str:
    """The API key, or a `ConfigurationError` that says how to set one."""
    env = os.environ if environ is None else environ
    if explicit:
        return explicit
    if env.get("CORRAL_API_KEY"):
        return env["CORRAL_API_KEY"]
    path = DEFAULT_KEY_FILE if key_file is None else key_file
    try:
        key = path.read_text().strip()
    except OSError:
        key = ""
    if key:
        return key
    raise ConfigurationError(
        "no corral API key: set CORRAL_API_KEY, pass --api-key (CLI) or api_key= (SDK); "
        f"on the daemon's host the admin key is in {path} (readable by root)"
    )
