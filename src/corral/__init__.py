"""corral: self-hosted sandboxes for AI agents.

The top-level package exports the Python SDK only; the daemon's modules (`corral.service`, ...)
are imported by `corral serve`, never by `import corral`.
"""

from corral.sdk import (
    APIError,
    AsyncClient,
    AsyncSandbox,
    AsyncTemplate,
    AuthenticationError,
    BuildError,
    CapacityError,
    Client,
    ConfigurationError,
    Conflict,
    ConnectionFailed,
    CorralError,
    ExecFailed,
    ExecResult,
    InvalidRequest,
    NoSpace,
    NotFound,
    PermissionDenied,
    Sandbox,
    SandboxUnavailable,
    Template,
)

__all__ = [
    "APIError",
    "AsyncClient",
    "AsyncSandbox",
    "AsyncTemplate",
    "AuthenticationError",
    "BuildError",
    "CapacityError",
    "Client",
    "ConfigurationError",
    "Conflict",
    "ConnectionFailed",
    "CorralError",
    "ExecFailed",
    "ExecResult",
    "InvalidRequest",
    "NoSpace",
    "NotFound",
    "PermissionDenied",
    "Sandbox",
    "SandboxUnavailable",
    "Template",
]
__version__ = "0.1.0"
