"""The E2B front: unchanged code using the official ``e2b`` SDK works against corral.

A thin translation, beside ``corral.api``, onto the service layer and the in-sandbox agent:

- ``rest``: the E2B control API (``/sandboxes``, ``/v2/sandboxes``), authenticated by
  ``X-API-KEY`` with a corral API key;
- ``snapshots``: E2B's fork and snapshot routes over corral's;
- ``process``, ``filesystem`` (Connect RPC, stubs generated into ``envd``) and ``files``
  (``/files``, ``/health``): envd, for requests addressed to a sandbox (``E2b-Sandbox-Id``
  header or a ``{port}-{id}.`` host name), authenticated by the sandbox's access token or a
  signed URL; ``mount`` dispatches them;
- ``tokens``: per-sandbox access tokens and file-URL signatures.

``install(app)`` mounts all of it into the daemon's FastAPI app, so one listener serves corral's own
API, the E2B API and the sandboxes' envd (the SDK's ``E2B_API_URL`` and ``E2B_SANDBOX_URL`` are
both the daemon's URL).
"""

from __future__ import annotations

from corral.e2b.mount import install

__all__ = ["install"]
