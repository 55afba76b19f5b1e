"""The layers go one way (docs/architecture.md): edges → service → mechanisms → foundations.

Read from the source with ``ast`` (every import, also those inside functions), so a lazy import
made to dodge a cycle counts like any other. A failure names the file, the import and the rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import corral

SRC = Path(corral.__file__).parent

# Shared foundations any daemon layer may use; they import nothing of the layers.
FOUNDATIONS = {"at_rest", "config", "errcodes", "http1", "paths", "timing"}
MECHANISMS = {"runtime", "network", "images", "storage"}
EDGES = {"api", "cli", "sdk", "mcp", "e2b", "console"}

# What each top-level package may import of corral (besides itself).
ALLOWED: dict[str, set[str]] = {
    "__init__": {"sdk"},  # ``from corral import Sandbox``: the package's face is the SDK
    "agent": set(),  # runs inside the sandbox: nothing of the daemon
    "interpreter": set(),  # the code interpreter's server, inside the sandbox too
    "sdk": {"errcodes", "http1"},  # a client library: no daemon code
    "mcp": {"sdk"},  # goes through the SDK
    "cli": {"sdk", "mcp", "api"},  # ``corral serve`` starts the daemon (api.server) lazily
    # The HTTP host of the daemon's edges: it mounts the E2B front, the console and MCP's HTTP.
    "api": FOUNDATIONS | {"service", "e2b", "console", "mcp", "daemon"},
    "e2b": FOUNDATIONS | {"service"},
    "console": FOUNDATIONS | {"service", "api", "sdk"},
    "daemon": FOUNDATIONS | MECHANISMS | {"service"},  # the wiring of real mechanisms
    "service": FOUNDATIONS | MECHANISMS,
    "runtime": FOUNDATIONS | {"agent"},  # injects the agent's code into sandboxes (a path)
    "network": FOUNDATIONS,
    "images": FOUNDATIONS,
    "storage": FOUNDATIONS,
    **{name: FOUNDATIONS for name in FOUNDATIONS},
}

# Inside service/: a lower module never imports a higher one (lowest first).
SERVICE_LAYERS: list[set[str]] = [
    {
        "errors",
        "model",
        "records",
        "images",
        "crash",
        "capacity",
        "agent_keys",
        "secret_presets",
        "console_sessions",
        "access",
        "quotas",
        "ratelimit",
        "events",
        "audit",
        "traffic",
    },
    {"auth", "policy", "templates", "secrets"},
    {"sandboxes"},
    {"launch", "lifecycle"},
    {"pools", "warm", "processes", "files", "project_services", "metrics", "ports", "code"},
    {"create"},
    {"snapshots", "builds"},
    {"workspace"},
]

# Imports that cross a layer on purpose, each with its reason (keep this short).
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("api/inbound/link.py", "corral.network"): (  # from corral.network import local_hop, splice
        "the inbound proxy moves its own connections' bytes with splice(2) and sets their "
        "congestion control; no sandbox control"
    ),
    # MCP's HTTP transport is mounted in the daemon: it checks the caller's key and names it in
    # the audit log, then acts only through the SDK like the stdio server.
    ("mcp/http.py", "corral.service.audit"): "the audit note of the call",
    ("mcp/http.py", "corral.service.auth"): "the caller's key",
}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    package = path.relative_to(SRC.parent).with_suffix("").parts
    if path.name == "__init__.py":
        package = (*package[:-1], "__init__")
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            if module in {"corral", "corral.service"}:  # ``from corral.service import x``
                found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] == "corral"]


def _sources() -> list[Path]:
    skip = SRC / "e2b" / "envd"  # generated protocol code
    return [p for p in sorted(SRC.rglob("*.py")) if skip not in p.parents]


def _top(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("").parts
    return rel[0]


def _service_rank(name: str) -> int | None:
    for rank, layer in enumerate(SERVICE_LAYERS):
        if name in layer:
            return rank
    return None


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(SRC)))
def test_layers_go_one_way(path: Path) -> None:
    top = _top(path)
    allowed = ALLOWED.get(top)
    rel = str(path.relative_to(SRC))
    assert allowed is not None, f"{top}: a new top-level package needs its row in ALLOWED"
    problems = []
    for line, name in _imports(path):
        parts = name.split(".")
        target = parts[1] if len(parts) > 1 else ""
        if target in ("", top):
            continue
        if target not in allowed and (rel, name) not in EXCEPTIONS:
            problems.append(f"line {line}: imports {name} ({top} may import {sorted(allowed)})")
    assert not problems, f"{path.relative_to(SRC)}: " + "; ".join(problems)


@pytest.mark.parametrize(
    "path",
    [p for p in _sources() if _top(p) == "service"],
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_service_modules_depend_downward(path: Path) -> None:
    rel = path.relative_to(SRC / "service").with_suffix("").parts
    if rel == ("__init__",):
        return
    own = _service_rank(rel[0])
    assert own is not None, f"service/{rel[0]}: place it in SERVICE_LAYERS"
    problems = []
    for line, name in _imports(path):
        parts = name.split(".")
        if parts[:2] != ["corral", "service"] or len(parts) < 3 or parts[2] == rel[0]:
            continue
        rank = _service_rank(parts[2])
        if rank is None or rank > own:
            problems.append(f"line {line}: imports {name}, a higher layer of service/")
    assert not problems, f"service/{'/'.join(rel)}: " + "; ".join(problems)


def test_the_rules_see_imports() -> None:
    """The reader finds absolute, relative and function-local imports (a rule that reads
    nothing would pass everything)."""
    found = dict((name, line) for line, name in _imports(SRC / "service" / "model.py"))
    assert "corral.service.errors" in found
