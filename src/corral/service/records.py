"""The types the service hands to its edges (api, e2b, console) and takes from them.

Edges import these from here, never from ``storage``, ``network`` or ``images``: the service is
the only layer that combines the mechanisms, so what it returns is its own vocabulary. Today the
records are the store's plain dataclasses (no ORM state attached) and the policy and build-step
types the mechanisms define; a change of either is then absorbed here, not in every route.
"""

from corral.images.steps import BuildStep
from corral.network.policy import EgressPolicy, EgressRule, NetworkMode, PolicyError
from corral.storage import (
    ApiKeyRecord,
    AuditEntry,
    ProjectServiceRecord,
    SandboxRecord,
    SnapshotRecord,
    TemplateRecord,
    TrustedKeyRecord,
)
from corral.storage.records import SecretRecord

__all__ = [
    "ApiKeyRecord",
    "AuditEntry",
    "BuildStep",
    "EgressPolicy",
    "EgressRule",
    "NetworkMode",
    "PolicyError",
    "ProjectServiceRecord",
    "SandboxRecord",
    "SecretRecord",
    "SnapshotRecord",
    "TemplateRecord",
    "TrustedKeyRecord",
]
