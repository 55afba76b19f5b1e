"""corral: self-hosted sandboxes for AI agents.

The top-level package exports the Python SDK only; the daemon's modules (`corral.service`, ...)
are imported by `corral serve`, never by `import corral`. The exports are loaded on first use
(PEP 562): `import corral` alone imports nothing else, and the CLI pays only for what it uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import corral.sdk

    value = getattr(corral.sdk, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])
