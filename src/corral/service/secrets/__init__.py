"""Brokered secrets: the store (sealed values, presets, bindings), the broker's view of them,
and the audit of every injection.

Invariants:
- a value exists in clear only in this daemon's memory (the broker's cache) and in the requests
  the broker sends to the hosts it is bound to; never in a record, an answer, a log line, a
  sandbox (env, files, memory), an export or an image. The store holds it sealed
  (``storage/sealing.py``, key in ``DATA/secrets.key``);
- a sandbox holds only placeholders (``corral-ph-`` and 32 random hex digits), one per secret
  and sandbox, bound in ``secret_bindings``; so a sandbox with brokered secrets is not
  secret-bearing and may be parked, forked, snapshotted with memory and exported. A fork is
  bound to its parent's placeholders (its memory holds them);
- ``injections`` is read on every intercepted request: a rotation, a removal or a revocation
  applies to the next request of every running sandbox;
- the audit is buffered in memory and written at most every ``AUDIT_FLUSH`` seconds (a request
  never waits for the disk); at most ``AUDIT_KEEP`` entries are kept.

Modules: ``service.py`` (``SecretService``: the store, bindings, the broker's source),
``setup.py`` (what a new sandbox gets), ``values.py`` (names, values, placeholders),
``audit.py`` (the buffered audit).
"""

from __future__ import annotations

from corral.service.secrets.service import SNAPSHOT_OWNER, SecretService
from corral.service.secrets.setup import TRUST_ENV, BrokeredSetup
from corral.service.secrets.values import PLACEHOLDER_PREFIX, options_of

__all__ = [
    "PLACEHOLDER_PREFIX",
    "SNAPSHOT_OWNER",
    "TRUST_ENV",
    "BrokeredSetup",
    "SecretService",
    "options_of",
]
