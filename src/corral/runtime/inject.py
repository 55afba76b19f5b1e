"""Injecting the in-sandbox agent: the daemon's own Python, bind-mounted read-only.

The agent depends on nothing in the image (a busybox-only image works). A private copy of what it
needs of the host (``agent_root.py``: the interpreter, the stdlib modules the agent imports, the
shared libraries they link, the loader) and the agent script are bind-mounted read-only under
``/.corral``; nothing else of the host (no site-packages, no host library dir) is visible::

    /.corral/ld.so                      the loader (PT_INTERP of the interpreter)
    /.corral/lib/                       the shared libraries (libpython when shared, libc, ...)
    /.corral/py/bin/python3             the interpreter binary
    /.corral/py/lib/python3.X/          the stdlib subset (with the prefix landmark os.py)
    /.corral/agent/agent.py             the agent: the ``corral.agent`` modules in one .pyc

and the agent runs as ``/.corral/ld.so --library-path /.corral/lib /.corral/py/bin/python3 -I -S
/.corral/agent/agent.py``. Python finds its prefix ``/.corral/py`` from the landmark
``lib/python3.X/os.py`` next to its ``bin``. The loader's ``--library-path`` applies to the agent
only: its children exec the image's own programs with the image's own libc (no LD_LIBRARY_PATH).

The agent is a package of small modules but is injected as one file: ``compile_agent`` builds one
bytecode file that carries all their code (nothing is compiled inside the sandbox). CPython runs
a script file by its magic number, whatever it is called, so the mount point stays ``agent.py``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import marshal
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from .agent_root import AgentRootError, build_agent_root, stdlib_of
from .base import AgentMount

__all__ = ["PREFIX", "InjectError", "build_agent_mount", "elf_interpreter", "host_agent_mount"]

PREFIX = "/.corral"
_PT_INTERP = 3


class InjectError(Exception):
    """The host's interpreter cannot be laid out for injection."""


def elf_interpreter(binary: Path) -> str | None:
    """The PT_INTERP path of a 64-bit little-endian ELF executable, or None if it has none."""
    with open(binary, "rb") as fh:
        ident = fh.read(64)
        if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
            raise InjectError(f"{binary} is not a 64-bit little-endian ELF file")
        phoff = struct.unpack_from("<Q", ident, 0x20)[0]
        phentsize, phnum = struct.unpack_from("<HH", ident, 0x36)
        for i in range(phnum):
            fh.seek(phoff + i * phentsize)
            p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack(
                "<IIQQQQ", fh.read(40)
            )
            if p_type == _PT_INTERP:
                fh.seek(p_offset)
                return fh.read(p_filesz).rstrip(b"\0").decode()
    return None


def _default_agent_path() -> Path:
    # Imported lazily: the agent package is optional for code that only renders bundles.
    module = importlib.import_module("corral.agent")
    return Path(module.AGENT_DIR)


def _interpreter_binary(base_prefix: Path, version: str) -> Path:
    for candidate in (base_prefix / "bin" / f"python{version}", Path(sys.executable)):
        if candidate.exists():
            return candidate.resolve()
    raise InjectError(f"no python{version} binary under {base_prefix}/bin")


# The injected file's own code: it makes the agent's modules, whose code objects it carries as
# a constant, importable from memory, then starts the agent as ``agent.py`` does from the tree.
_BOOTSTRAP = """\
import sys
from _frozen_importlib import ModuleSpec


class AgentModules:
    \"\"\"Finds and loads the agent's modules (package ``agent``) from their code objects.\"\"\"

    def __init__(self, codes):
        self.codes = dict(codes)

    def find_spec(self, name, path=None, target=None):
        if name in self.codes:
            return ModuleSpec(name, self, is_package=name == "agent")
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(self.codes.pop(module.__name__), module.__dict__)


sys.meta_path.insert(0, AgentModules(CODES))
from agent.main import main

if __name__ == "__main__":
    sys.exit(main())
"""
_CODES = "corral agent module codes"  # the placeholder that the codes replace
_BUILD_FORMAT = b"corral-agent-build-2"  # part of the cache key: change it with the layout


def _bootstrap_code(codes: tuple[tuple[str, types.CodeType], ...]) -> types.CodeType:
    source = _BOOTSTRAP.replace("CODES", repr(_CODES))
    code = compile(source, "agent.py", "exec", dont_inherit=True, optimize=0)
    if _CODES not in code.co_consts:
        raise InjectError("the agent's bootstrap lost its placeholder")
    return code.replace(co_consts=tuple(codes if c == _CODES else c for c in code.co_consts))


def compile_agent(agent: Path, cache_dir: Path) -> Path:
    """The agent package ``agent`` built into one bytecode file for this interpreter, cached by
    a hash of all its sources.

    The file is a .pyc that CPython runs as a script (by its magic number, whatever its name):
    its code carries the code objects of the package's modules (all but ``__init__.py``, which
    is the daemon's, and ``agent.py``, the launcher for the source tree) and imports them from
    memory as the package ``agent``, so a sandbox starts the agent without compiling anything
    and reads one file. Not a zipapp: a zip run as a script goes through ``runpy``, whose imports
    (contextlib, warnings, importlib) and per-member reads made the agent's start 7-12 ms slower
    inside gVisor.
    """
    modules = sorted(p for p in agent.glob("*.py") if p.name not in ("__init__.py", "agent.py"))
    if not modules:
        raise InjectError(f"agent package {agent} has no modules")
    sources = {"agent": b""} | {f"agent.{m.stem}": m.read_bytes() for m in modules}
    digest = hashlib.sha256(_BUILD_FORMAT + _BOOTSTRAP.encode())
    for name, source in sources.items():
        digest.update(b"\0%s\0%d\0%s" % (name.encode(), len(source), source))
    tag = sys.implementation.cache_tag
    target = cache_dir / f"agent-{digest.hexdigest()[:16]}.{tag}.pyc"
    if not target.is_file():
        codes = tuple(
            (name, compile(source, f"{name}.py", "exec", dont_inherit=True, optimize=0))
            for name, source in sources.items()
        )
        code = marshal.dumps(_bootstrap_code(codes))
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        header = importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, 0, 0)  # timestamp, unchecked
        partial.write_bytes(header + code)
        os.replace(partial, target)
    return target


def build_agent_mount(
    agent_path: Path | None = None, compiled_dir: Path | None = None
) -> AgentMount:
    """Lay out this process's interpreter and the agent for injection into a sandbox.

    ``agent_path`` is the agent package (by default ``corral.agent``), built into one bytecode
    file in ``compiled_dir`` by ``compile_agent``, or a single file mounted as it is. The
    interpreter, the stdlib modules the agent imports and the libraries they link are copied into
    a private root under ``compiled_dir`` (``agent_root.py``); nothing else of the host is bound.
    """
    if compiled_dir is None:
        raise InjectError("injecting the agent needs a directory for its private runtime")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    base_prefix = Path(sys.base_prefix)
    python = _interpreter_binary(base_prefix, version)
    stdlib = stdlib_of(base_prefix)
    if not (stdlib / "os.py").exists():
        raise InjectError(f"no standard library at {stdlib}")
    agent = (agent_path or _default_agent_path()).resolve()
    if agent.is_dir():
        source = compile_agent(agent, compiled_dir)
    elif agent.is_file():
        source = agent
    else:
        raise InjectError(f"agent {agent} does not exist")
    if elf_interpreter(python) is None:
        raise InjectError(f"{python} is statically linked; inject it without a loader")
    try:
        root = build_agent_root(python, stdlib, agent, compiled_dir)
    except (AgentRootError, OSError, subprocess.SubprocessError) as exc:
        raise InjectError(f"laying out the agent's runtime from {python}: {exc}") from exc

    mounts: tuple[tuple[str, str], ...] = (
        (str(root.loader), f"{PREFIX}/ld.so"),
        (str(root.lib), f"{PREFIX}/lib"),
        (str(root.py), f"{PREFIX}/py"),
        (str(source), f"{PREFIX}/agent/agent.py"),
    )
    tools = (
        f"{PREFIX}/ld.so",
        "--library-path",
        f"{PREFIX}/lib",
        f"{PREFIX}/py/bin/python3",
        "-I",
        "-S",
    )
    return AgentMount(mounts=mounts, argv=(*tools, f"{PREFIX}/agent/agent.py"), tools=tools)


GO_AGENT_BINARY = Path(__file__).resolve().parent.parent / "agent" / "go" / "corral-agent"
# Where sandboxes made before builds were kept run the agent from (their memory images map it
# there); it holds the current build, which is the same file as long as the agent is unchanged.
GO_AGENT_TARGET = f"{PREFIX}/agent/corral-agent"
# Every build of the Go agent this daemon ever ran, one directory each by content: a memory image
# (park, fork, snapshot, warm template) maps the build its agent was started from, which is still
# here after an upgrade rebuilt the agent, so the image restores.
GO_AGENT_BUILDS = f"{PREFIX}/agent/builds"


def keep_go_agent(binary: Path, compiled_dir: Path) -> str:
    """Keep a copy of ``binary`` under ``compiled_dir/go/<digest>/corral-agent`` (made once,
    whole or not at all, never changed after) and return its digest.

    gVisor restores a memory image's file mappings from the files at the same paths: a sandbox
    parked before ``scripts/setup`` rebuilt the agent in place found the new binary under its
    old pages and never answered again (its wake failed). Kept builds are never removed by the
    daemon (a few MiB each; a new one only when the agent changes)."""
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()[:16]
    builds = compiled_dir / "go"
    home = builds / digest
    if (home / "corral-agent").is_file():
        return digest
    builds.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=builds, prefix=".partial-"))
    try:
        kept = partial / "corral-agent"
        shutil.copyfile(binary, kept)
        kept.chmod(0o755)
        with open(kept, "rb") as fh:
            os.fsync(fh.fileno())
        partial.chmod(0o755)
        try:
            partial.rename(home)
        except OSError:
            if not (home / "corral-agent").is_file():  # not another daemon's copy: a failure
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return digest


def host_agent_mount(compiled_dir: Path, go_binary: Path | None = None) -> AgentMount:
    """The Python agent's mount (this host's interpreter and ``corral.agent``, built into
    ``compiled_dir``), with the Go agent's builds mounted beside it when it is built
    (``go_agent_mount`` says why)."""
    python = build_agent_mount(compiled_dir=compiled_dir)
    path = (go_binary or GO_AGENT_BINARY).resolve()
    if not (path.is_file() and os.access(path, os.X_OK)):
        return python
    digest = keep_go_agent(path, compiled_dir)
    builds = compiled_dir / "go"
    mounts = (
        *python.mounts,
        (str(builds / digest / "corral-agent"), GO_AGENT_TARGET),
        (str(builds), GO_AGENT_BUILDS),
    )
    return AgentMount(mounts=mounts, argv=python.argv, tools=python.tools)


def go_agent_argv(mount: AgentMount) -> tuple[str, ...]:
    """The Go agent's command line in a sandbox with ``mount``: its current kept build."""
    for source, target in mount.mounts:
        if target == GO_AGENT_TARGET:
            return (f"{GO_AGENT_BUILDS}/{Path(source).parent.name}/corral-agent",)
    raise InjectError("the agent mount has no Go agent")


def go_agent_mount(compiled_dir: Path, binary: Path | None = None) -> AgentMount:
    """The agent mount for the static Go agent (``src/corral/agent/go``, built by
    ``scripts/setup``): one binary, bind-mounted read-only and run as the sandbox's init; it
    needs no interpreter and no libraries.

    The Python agent's mounts come along (laid out in ``compiled_dir``), as the Go binary comes
    along with the Python agent: every sandbox has the same mounts whichever agent runs, so a
    memory image (park, fork, snapshot, warm template) restores under either setting, its
    checkpointed agent running on (gVisor's restore needs every mount the checkpoint had and
    accepts more). The daemon's interpreter also runs its in-sandbox tools (``tools``: files-only
    snapshots, never the image's programs)."""
    path = (binary or GO_AGENT_BINARY).resolve()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise InjectError(
            f"the Go agent {path} is missing (CORRAL_AGENT=go): run scripts/setup, which "
            "builds it (or scripts/build-agent), or set CORRAL_AGENT=python"
        )
    both = host_agent_mount(compiled_dir, go_binary=path)
    return AgentMount(mounts=both.mounts, argv=go_agent_argv(both), tools=both.tools)
