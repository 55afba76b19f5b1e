"""The agent's private runtime: only what the injected agent needs of the host's Python, copied.

Every sandbox sees this and nothing else of the host (not its site-packages, not its whole
library dir)::

    <root>/ld.so                    the interpreter's loader (its PT_INTERP)
    <root>/lib/<soname>             the shared libraries the interpreter and the copied
                                    extension modules link (libpython, libc, libffi...), by ldd
    <root>/py/bin/python3           the interpreter
    <root>/py/lib/python3.X/        the stdlib modules the agent imports, and what they import
                                    (with their cached bytecode), os.py (the prefix landmark),
                                    encodings/, lib-dynload/ with the extensions among them

What the agent imports is computed, not listed: every absolute import in the agent's sources
(at their top and inside functions) is imported by the host interpreter in a child
``python -I -S`` (as the agent runs), and every module that child then holds with a file is
copied. A root is built once per key (interpreter, stdlib, agent sources) into a new directory
beside the others and never changed after; the daemon starts in milliseconds when it exists.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

__all__ = ["AgentRoot", "AgentRootError", "agent_imports", "build_agent_root", "stdlib_of"]

_FORMAT = b"corral-agent-root-2"
# Needed by every start (the codecs and the prefix landmark), and by the tools the daemon runs
# with this interpreter inside a sandbox besides the agent (files-only snapshots: tarfile).
_ALWAYS = ("encodings", "os", "tarfile")
_PROBE = """\
import json, sys
for name in sys.argv[1:]:
    __import__(name)
import traceback
try:
    raise ValueError("probe")
except ValueError:
    traceback.format_exc()  # the agent's 500 path: linecache, tokenize
files = {}
for name, module in list(sys.modules.items()):
    origin = getattr(getattr(module, "__spec__", None), "origin", None)
    if origin and origin not in ("built-in", "frozen"):
        files[name] = origin
print(json.dumps(files))
"""


class AgentRootError(Exception):
    """The agent's private runtime cannot be laid out from this host's interpreter."""


class AgentRoot:
    """A built root: where its parts are on the host, and the Python version it holds."""

    def __init__(self, path: Path, version: str) -> None:
        self.path = path
        self.version = version

    @property
    def loader(self) -> Path:
        return self.path / "ld.so"

    @property
    def lib(self) -> Path:
        return self.path / "lib"

    @property
    def py(self) -> Path:
        return self.path / "py"


def agent_imports(agent: Path) -> list[str]:
    """Absolute module names the agent's sources import, anywhere in them (not its own)."""
    sources = sorted(agent.glob("*.py")) if agent.is_dir() else [agent]
    names: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source.read_bytes(), str(source))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
    return sorted(n for n in names if n.split(".")[0] not in ("corral", "agent"))


def _ldd(binary: Path) -> tuple[dict[str, str], str | None]:
    """The shared libraries ``binary`` needs (soname -> host path) and its loader."""
    out = subprocess.run(
        ["ldd", str(binary)], capture_output=True, text=True, timeout=30, env={"LC_ALL": "C"}
    )
    if out.returncode != 0 and "not a dynamic executable" not in out.stdout + out.stderr:
        raise AgentRootError(f"ldd {binary} failed: {out.stderr.strip() or out.stdout.strip()}")
    libs: dict[str, str] = {}
    loader = None
    for line in out.stdout.splitlines():
        parts = line.split()
        if "=>" in parts:
            name, target = parts[0], parts[parts.index("=>") + 1]
            if target == "not":
                raise AgentRootError(f"{binary} needs {name}, which the host does not have")
            if target.startswith("/"):
                libs[name] = target
        elif parts and parts[0].startswith("/"):
            loader = parts[0]
    return libs, loader


def _key(python: Path, stdlib: Path, agent: Path) -> str:
    digest = hashlib.sha256(_FORMAT + sys.version.encode())
    for path in (python, stdlib):
        st = path.stat()
        digest.update(b"\0%s\0%d\0%d" % (str(path).encode(), st.st_size, st.st_mtime_ns))
    sources = sorted(agent.glob("*.py")) if agent.is_dir() else [agent]
    for source in sources:
        digest.update(b"\0" + source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:16]


def _copy(source: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, dest)  # keeps mtimes: the copied bytecode stays valid for its source
    os.chmod(dest, 0o755 if os.access(source, os.X_OK) else 0o644)


def _copy_module(origin: Path, stdlib: Path, py_lib: Path) -> None:
    rel = origin.relative_to(stdlib)
    _copy(origin, py_lib / rel)
    if origin.suffix == ".py":
        tag = sys.implementation.cache_tag
        cached = origin.parent / "__pycache__" / f"{origin.stem}.{tag}.pyc"
        if cached.is_file():
            _copy(cached, py_lib / rel.parent / "__pycache__" / cached.name)


def build_agent_root(python: Path, stdlib: Path, agent: Path, parent: Path) -> AgentRoot:
    """The private root for ``python`` (whose standard library is ``stdlib``) and ``agent``,
    under ``parent``; built (into a new directory, then renamed) unless it exists."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    root = AgentRoot(parent / f"runtime-{_key(python, stdlib, agent)}", version)
    if (root.path / ".complete").is_file():
        return root
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".runtime-", dir=parent))
    try:
        _lay_out(AgentRoot(work, version), python, stdlib, agent)
        (work / ".complete").write_text("")
        os.chmod(work, 0o755)
        try:
            os.replace(work, root.path)
        except OSError:  # another daemon built the same root meanwhile
            if not (root.path / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return root


def _lay_out(root: AgentRoot, python: Path, stdlib: Path, agent: Path) -> None:
    names = [*_ALWAYS, *agent_imports(agent)]
    probe = subprocess.run(
        [str(python), "-I", "-S", "-c", _PROBE, *names],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    if probe.returncode != 0:
        raise AgentRootError(f"importing the agent's modules failed: {probe.stderr.strip()}")
    origins = {Path(os.path.realpath(p)) for p in json.loads(probe.stdout).values()}
    stdlib = Path(os.path.realpath(stdlib))
    py_lib = root.py / "lib" / f"python{root.version}"
    outside = sorted(str(p) for p in origins if not p.is_relative_to(stdlib))
    if outside:
        raise AgentRootError(f"the agent would import modules outside the stdlib: {outside}")
    for origin in sorted(origins):
        _copy_module(origin, stdlib, py_lib)
    for extra in (stdlib / "os.py", *sorted((stdlib / "encodings").glob("*.py"))):
        _copy_module(extra, stdlib, py_lib)
    (py_lib / "lib-dynload").mkdir(parents=True, exist_ok=True)  # exec_prefix's landmark

    _copy(python, root.py / "bin" / "python3")
    needed, loader = _ldd(python)
    for origin in origins:
        if origin.suffix == ".so":
            needed.update(_ldd(origin)[0])
    if loader is None:
        raise AgentRootError(f"{python} names no loader; a static interpreter is not supported")
    root.lib.mkdir(parents=True, exist_ok=True)
    for soname, host_path in sorted(needed.items()):
        _copy(Path(os.path.realpath(host_path)), root.lib / soname)
    _copy(Path(os.path.realpath(loader)), root.loader)


def stdlib_of(base_prefix: Path) -> Path:
    return Path(sysconfig.get_path("stdlib", vars={"installed_base": str(base_prefix)}))
