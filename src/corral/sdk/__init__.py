"""The corral Python SDK: sandboxes, their processes and files, over the daemon's HTTP API.

The async core (`AsyncClient`, `AsyncSandbox`) is the implementation; `Client` and `Sandbox`
run it on a private event loop for synchronous callers. Nothing here imports daemon code.
"""

from corral.sdk.client import AsyncClient
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
    SandboxUnavailable,
    Timeout,
    TooLarge,
    UntrustedExport,
)
from corral.sdk.files import AsyncFiles
from corral.sdk.models import (
    Capacity,
    ExecResult,
    FileInfo,
    ImportResult,
    NetworkChange,
    NetworkPolicy,
    ProcessEvent,
    ProcessInfo,
    ResourceUsage,
    SandboxInfo,
    SandboxOptions,
    SnapshotInfo,
    TemplateInfo,
    WriteResult,
)
from corral.sdk.process import AsyncProcess
from corral.sdk.sandbox import AsyncSandbox
from corral.sdk.sync import Client, Files, Network, Process, Sandbox
from corral.sdk.templates import AsyncTemplate, BuildError, BuildEvent, Template

__all__ = [
    "APIError",
    "AsyncClient",
    "AsyncFiles",
    "AsyncProcess",
    "AsyncSandbox",
    "AsyncTemplate",
    "AuthenticationError",
    "BuildError",
    "BuildEvent",
    "Capacity",
    "CapacityError",
    "Client",
    "ConfigurationError",
    "Conflict",
    "ConnectionFailed",
    "CorralError",
    "ExecFailed",
    "ExecResult",
    "FileInfo",
    "Files",
    "ImportResult",
    "InvalidRequest",
    "Network",
    "NetworkChange",
    "NetworkPolicy",
    "NoSpace",
    "NotFound",
    "PermissionDenied",
    "Process",
    "ProcessEvent",
    "ProcessInfo",
    "ResourceUsage",
    "Sandbox",
    "SandboxInfo",
    "SandboxOptions",
    "SandboxUnavailable",
    "SnapshotInfo",
    "Template",
    "TemplateInfo",
    "Timeout",
    "TooLarge",
    "UntrustedExport",
    "WriteResult",
]
