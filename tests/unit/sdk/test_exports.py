"""The SDK's public surface: ``corral.sdk.__all__`` (and ``corral.__all__``, its short list) name
exactly what users import, every name resolves lazily, every module's ``__all__`` holds only
what it defines, and every SDK type a public signature names can be imported from ``corral.sdk``."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys

import corral
import corral.sdk as sdk

SYNC_TWINS = [
    *("Client", "Code", "Files", "Keys", "Network", "Policy", "Ports", "Process", "Pty", "Ptys"),
    *("Sandbox", "Services"),
]
ASYNC_CORE = [f"Async{name}" for name in SYNC_TWINS]


def test_the_public_names() -> None:
    assert sorted(sdk.__all__) == sorted(
        [
            *ASYNC_CORE,
            *SYNC_TWINS,
            *("AsyncTemplate", "Template", "BuildError", "BuildEvent"),
            *("APIError", "AuthenticationError", "CapacityError", "ConfigurationError"),
            *("Conflict", "ConnectionFailed", "CorralError", "ExecFailed", "InvalidRequest"),
            *("NoSpace", "NotFound", "PermissionDenied", "SandboxUnavailable", "Timeout"),
            *("TooLarge", "UntrustedExport", "PolicyDenied", "QuotaExceeded", "RateLimited"),
            *("ApiKeyInfo", "AuditEntry", "Event", "WorkspacePolicy"),
            *("Capacity", "ExecResult", "FileInfo", "ImportResult", "NetworkChange"),
            *("CodeContext", "Execution"),
            *("NetworkPolicy", "PortInfo", "ProcessEvent", "ProcessInfo", "ProjectServiceInfo"),
            *("ResourceUsage", "SandboxInfo", "SandboxOptions", "SecretAuditEntry"),
            "SandboxMetrics",
            *("SecretInfo", "SnapshotInfo", "TemplateInfo", "TrustedKey", "WriteResult"),
        ]
    )
    assert len(set(sdk.__all__)) == len(sdk.__all__)
    assert sorted(dir(sdk)) == sorted(sdk.__all__)
    for name in sdk.__all__:
        value = getattr(sdk, name)
        assert value.__name__ == name
        assert value.__module__.startswith("corral.sdk.")


def test_the_top_level_package_is_the_short_list() -> None:
    assert set(corral.__all__) <= set(sdk.__all__)
    assert {"Sandbox", "AsyncSandbox", "Client", "AsyncClient", "Template"} <= set(corral.__all__)
    for name in corral.__all__:
        assert getattr(corral, name) is getattr(sdk, name)


def test_every_module_exports_only_what_it_defines() -> None:
    for info in pkgutil.iter_modules(sdk.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"corral.sdk.{info.name}")
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                # a package (corral.sdk.testing) may gather what its own modules define
                owner = value.__module__
                assert owner == module.__name__ or owner.startswith(module.__name__ + "."), name


def test_every_sdk_type_in_a_public_signature_is_exported() -> None:
    """A user can import every class that a public method takes or returns."""
    defined = {}
    for info in pkgutil.iter_modules(sdk.__path__):
        module = importlib.import_module(f"corral.sdk.{info.name}")
        for name, value in vars(module).items():
            # a package (corral.sdk.models) gathers what its own modules define
            owner = getattr(value, "__module__", "")
            if inspect.isclass(value) and (
                owner == module.__name__ or owner.startswith(module.__name__ + ".")
            ):
                defined[name] = value
    async_only = set(_generator_async_only())
    named: set[str] = set()
    for cls_name in [*ASYNC_CORE, *SYNC_TWINS]:
        for member_name, member in vars(getattr(sdk, cls_name)).items():
            if member_name.startswith("_") or (cls_name, member_name) in async_only:
                continue
            function = member.fget if isinstance(member, property) else member
            if isinstance(function, classmethod | staticmethod):
                function = function.__func__
            if not inspect.isfunction(function):
                continue
            for text in function.__annotations__.values():
                tree = ast.parse(str(text), mode="eval")
                named |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    sdk_types = {n for n in named if n in defined and not n.startswith("_")}
    assert sdk_types - set(sdk.__all__) == set()
    assert {"SandboxInfo", "ExecResult", "FileInfo"} <= sdk_types  # the check sees them


def _generator_async_only() -> dict[tuple[str, str], str]:
    from tests.unit.sdk.test_sync_parity import GEN

    return dict(GEN.ASYNC_ONLY)


def test_importing_corral_imports_no_http_stack() -> None:
    probe = "import corral, sys; print(sorted(m for m in ('httpx', 'anyio') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
