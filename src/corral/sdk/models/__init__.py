"""Plain data the SDK hands back: sandboxes, processes, files, capacity.

These are light frozen dataclasses built from the daemon's JSON (`from_wire`), independent of the
daemon's own pydantic schemas so the SDK never imports daemon code. Unknown fields are ignored,
so a newer daemon that adds fields does not break an older SDK. `to_dict()` gives JSON-ready data.

One module per resource (`sandboxes`, `processes`, `files`, `templates`, `workspace`); this
package re-exports every model.
"""

from __future__ import annotations

from corral.sdk._exec_models import ExecResult, ProcessEvent
from corral.sdk.models.files import FileInfo, WriteResult
from corral.sdk.models.processes import ProcessInfo
from corral.sdk.models.sandboxes import (
    Capacity,
    NetworkChange,
    NetworkPolicy,
    ResourceUsage,
    SandboxInfo,
    SandboxMetrics,
)
from corral.sdk.models.sandboxes import PortInfo as PortInfo
from corral.sdk.models.sandboxes import SandboxOptions as SandboxOptions
from corral.sdk.models.templates import ImportResult, SnapshotInfo, TemplateInfo, TrustedKey
from corral.sdk.models.workspace import ProjectServiceInfo, SecretAuditEntry, SecretInfo

__all__ = [
    "Capacity",
    "ExecResult",
    "FileInfo",
    "ImportResult",
    "NetworkChange",
    "NetworkPolicy",
    "ProcessEvent",
    "ProcessInfo",
    "ProjectServiceInfo",
    "ResourceUsage",
    "SandboxInfo",
    "SandboxMetrics",
    "SecretAuditEntry",
    "SecretInfo",
    "SnapshotInfo",
    "TemplateInfo",
    "TrustedKey",
    "WriteResult",
]
