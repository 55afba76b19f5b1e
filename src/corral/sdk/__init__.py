"""The corral Python SDK: sandboxes, their processes and files, over the daemon's HTTP API.

The async core (`AsyncClient`, `AsyncSandbox`) is the implementation; `Client` and `Sandbox`
run it on a private event loop for synchronous callers. Nothing here imports daemon code.

The names below are loaded on first use (PEP 562), so `from corral.sdk import CorralError`
imports the error classes only, not httpx or the event loop.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.sdk.client import (
        AsyncClient,
    )
    from corral.sdk.code import (
        AsyncCode,
        CodeContext,
        Execution,
    )
    from corral.sdk.errors import (
        APIError,
        AuthenticationError,
        CapacityError,
        ConfigurationError,
        Conflict,
        ConnectionFailed,
        CorralError,
        ExecFailed,
        InvalidRequest,
        NoSpace,
        NotFound,
        PermissionDenied,
        PolicyDenied,
        QuotaExceeded,
        RateLimited,
        SandboxUnavailable,
        Timeout,
        TooLarge,
        UntrustedExport,
    )
    from corral.sdk.files import (
        AsyncFiles,
    )
    from corral.sdk.models import (
        Capacity,
        ExecResult,
        FileInfo,
        ImportResult,
        NetworkChange,
        NetworkPolicy,
        PortInfo,
        ProcessEvent,
        ProcessInfo,
        ProjectServiceInfo,
        ResourceUsage,
        SandboxInfo,
        SandboxMetrics,
        SandboxOptions,
        SecretAuditEntry,
        SecretInfo,
        SnapshotInfo,
        TemplateInfo,
        TrustedKey,
        WriteResult,
    )
    from corral.sdk.network import (
        AsyncNetwork,
    )
    from corral.sdk.ports import (
        AsyncPorts,
    )
    from corral.sdk.process import (
        AsyncProcess,
    )
    from corral.sdk.pty import (
        AsyncPty,
        AsyncPtys,
    )
    from corral.sdk.sandbox import (
        AsyncSandbox,
    )
    from corral.sdk.services import AsyncServices
    from corral.sdk.sync import (
        Client,
        Code,
        Files,
        Keys,
        Network,
        Policy,
        Ports,
        Process,
        Pty,
        Ptys,
        Sandbox,
        Services,
    )
    from corral.sdk.templates import (
        AsyncTemplate,
        BuildError,
        BuildEvent,
        Template,
    )
    from corral.sdk.workspace import (
        ApiKeyInfo,
        AsyncKeys,
        AsyncPolicy,
        AuditEntry,
        Event,
        WorkspacePolicy,
    )

_EXPORTS = {
    "AsyncCode": "corral.sdk.code",
    "Code": "corral.sdk.sync",
    "CodeContext": "corral.sdk.code",
    "Execution": "corral.sdk.code",
    "APIError": "corral.sdk.errors",
    "ApiKeyInfo": "corral.sdk.workspace",
    "AsyncKeys": "corral.sdk.workspace",
    "AsyncPolicy": "corral.sdk.workspace",
    "Keys": "corral.sdk.sync",
    "Policy": "corral.sdk.sync",
    "AsyncServices": "corral.sdk.services",
    "Services": "corral.sdk.sync",
    "AuditEntry": "corral.sdk.workspace",
    "Event": "corral.sdk.workspace",
    "WorkspacePolicy": "corral.sdk.workspace",
    "AsyncClient": "corral.sdk.client",
    "AsyncFiles": "corral.sdk.files",
    "AsyncNetwork": "corral.sdk.network",
    "AsyncPorts": "corral.sdk.ports",
    "AsyncProcess": "corral.sdk.process",
    "AsyncPty": "corral.sdk.pty",
    "AsyncPtys": "corral.sdk.pty",
    "AsyncSandbox": "corral.sdk.sandbox",
    "AsyncTemplate": "corral.sdk.templates",
    "AuthenticationError": "corral.sdk.errors",
    "BuildError": "corral.sdk.templates",
    "BuildEvent": "corral.sdk.templates",
    "Capacity": "corral.sdk.models",
    "CapacityError": "corral.sdk.errors",
    "Client": "corral.sdk.sync",
    "ConfigurationError": "corral.sdk.errors",
    "Conflict": "corral.sdk.errors",
    "ConnectionFailed": "corral.sdk.errors",
    "CorralError": "corral.sdk.errors",
    "ExecFailed": "corral.sdk.errors",
    "ExecResult": "corral.sdk.models",
    "FileInfo": "corral.sdk.models",
    "Files": "corral.sdk.sync",
    "ImportResult": "corral.sdk.models",
    "InvalidRequest": "corral.sdk.errors",
    "Network": "corral.sdk.sync",
    "NetworkChange": "corral.sdk.models",
    "NetworkPolicy": "corral.sdk.models",
    "NoSpace": "corral.sdk.errors",
    "NotFound": "corral.sdk.errors",
    "PermissionDenied": "corral.sdk.errors",
    "PolicyDenied": "corral.sdk.errors",
    "QuotaExceeded": "corral.sdk.errors",
    "RateLimited": "corral.sdk.errors",
    "PortInfo": "corral.sdk.models",
    "Ports": "corral.sdk.sync",
    "Process": "corral.sdk.sync",
    "ProcessEvent": "corral.sdk.models",
    "ProcessInfo": "corral.sdk.models",
    "ProjectServiceInfo": "corral.sdk.models",
    "Pty": "corral.sdk.sync",
    "Ptys": "corral.sdk.sync",
    "ResourceUsage": "corral.sdk.models",
    "Sandbox": "corral.sdk.sync",
    "SandboxInfo": "corral.sdk.models",
    "SandboxMetrics": "corral.sdk.models",
    "SandboxOptions": "corral.sdk.models",
    "SandboxUnavailable": "corral.sdk.errors",
    "SecretAuditEntry": "corral.sdk.models",
    "SecretInfo": "corral.sdk.models",
    "SnapshotInfo": "corral.sdk.models",
    "Template": "corral.sdk.templates",
    "TemplateInfo": "corral.sdk.models",
    "Timeout": "corral.sdk.errors",
    "TooLarge": "corral.sdk.errors",
    "TrustedKey": "corral.sdk.models",
    "UntrustedExport": "corral.sdk.errors",
    "WriteResult": "corral.sdk.models",
}

__all__ = [
    "APIError",
    "ApiKeyInfo",
    "AsyncClient",
    "AsyncCode",
    "AsyncFiles",
    "AsyncKeys",
    "AsyncNetwork",
    "AsyncPolicy",
    "AsyncPorts",
    "AsyncProcess",
    "AsyncPty",
    "AsyncPtys",
    "AsyncSandbox",
    "AsyncServices",
    "AsyncTemplate",
    "AuditEntry",
    "AuthenticationError",
    "BuildError",
    "BuildEvent",
    "Capacity",
    "CapacityError",
    "Client",
    "Code",
    "CodeContext",
    "ConfigurationError",
    "Conflict",
    "ConnectionFailed",
    "CorralError",
    "Event",
    "ExecFailed",
    "ExecResult",
    "Execution",
    "FileInfo",
    "Files",
    "ImportResult",
    "InvalidRequest",
    "Keys",
    "Network",
    "NetworkChange",
    "NetworkPolicy",
    "NoSpace",
    "NotFound",
    "PermissionDenied",
    "Policy",
    "PolicyDenied",
    "PortInfo",
    "Ports",
    "Process",
    "ProcessEvent",
    "ProcessInfo",
    "ProjectServiceInfo",
    "Pty",
    "Ptys",
    "QuotaExceeded",
    "RateLimited",
    "ResourceUsage",
    "Sandbox",
    "SandboxInfo",
    "SandboxMetrics",
    "SandboxOptions",
    "SandboxUnavailable",
    "SecretAuditEntry",
    "SecretInfo",
    "Services",
    "SnapshotInfo",
    "Template",
    "TemplateInfo",
    "Timeout",
    "TooLarge",
    "TrustedKey",
    "UntrustedExport",
    "WorkspacePolicy",
    "WriteResult",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
