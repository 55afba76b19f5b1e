"""Injecting the in-sandbox agent: the daemon's own Python, bind-mounted read-only.

The agent depends on nothing in the image (a busybox-only image works). The host's interpreter,
its standard library, its shared libpython (if built shared, as pyenv builds are), the host's C
libraries and dynamic loader, and the agent script are bind-mounted read-only under ``/.corral``::

    /.corral/ld.so                      the host's dynamic loader (PT_INTERP of the interpreter)
    /.corral/lib, /.corral/lib2, ...    host library dirs (/lib/<multiarch>, /usr/lib/<multiarch>)
    /.corral/py/bin/python3             the interpreter binary
    /.corral/py/lib/python3.X/          the stdlib with lib-dynload (the prefix landmark os.py)
    /.corral/py/lib/libpython3.X.so.1.0 the shared libpython, when there is one
    /.corral/agent/agent.py             the agent

and the agent runs as ``/.corral/ld.so --library-path <dirs> /.corral/py/bin/python3 -I -S
/.corral/agent/agent.py``. Python finds its prefix ``/.corral/py`` from the landmark
``lib/python3.X/os.py`` next to its ``bin``. The loader's ``--library-path`` applies to the agent
only: its children exec the image's own programs with the image's own libc (no LD_LIBRARY_PATH).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import py_compile
import struct
import sys
import sysconfig
from pathlib import Path

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
    return Path(module.AGENT_PATH)


def _interpreter_binary(base_prefix: Path, version: str) -> Path:
    for candidate in (base_prefix / "bin" / f"python{version}", Path(sys.executable)):
        if candidate.exists():
            return candidate.resolve()
    raise InjectError(f"no python{version} binary under {base_prefix}/bin")


def compile_agent(agent: Path, cache_dir: Path) -> Path:
    """The agent compiled to bytecode for this interpreter, cached by the source's hash.

    A sandbox then starts the agent without compiling it (~12 ms inside gVisor). The bytecode
    keeps the ``agent.py`` name inside the sandbox: CPython runs a script file by its magic
    number, so no mount point changes.
    """
    digest = hashlib.sha256(agent.read_bytes()).hexdigest()[:16]
    tag = sys.implementation.cache_tag
    target = cache_dir / f"agent-{digest}.{tag}.pyc"
    if not target.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        py_compile.compile(str(agent), cfile=str(partial), doraise=True)
        os.replace(partial, target)
    return target


def build_agent_mount(
    agent_path: Path | None = None, compiled_dir: Path | None = None
) -> AgentMount:
    """Lay out this process's interpreter and the agent for injection into a sandbox
    (the agent as bytecode when ``compiled_dir`` is given)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    base_prefix = Path(sys.base_prefix)
    python = _interpreter_binary(base_prefix, version)
    stdlib = Path(sysconfig.get_path("stdlib", vars={"installed_base": str(base_prefix)}))
    if not (stdlib / "os.py").exists():
        raise InjectError(f"no standard library at {stdlib}")
    agent = (agent_path or _default_agent_path()).resolve()
    if not agent.is_file():
        raise InjectError(f"agent script {agent} does not exist")

    py_lib = f"{PREFIX}/py/lib"
    mounts: list[tuple[str, str]] = [
        (str(python), f"{PREFIX}/py/bin/python3"),
        (str(stdlib.resolve()), f"{py_lib}/python{version}"),
    ]
    library_path = [py_lib]
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        soname = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
        libdir = sysconfig.get_config_var("LIBDIR")
        libpython = Path(libdir or "", soname or "")
        if soname and libpython.is_file():
            mounts.append((str(libpython.resolve()), f"{py_lib}/{soname}"))

    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{os.uname().machine}-linux-gnu"
    host_lib_dirs: list[str] = []
    for candidates in ((f"/lib/{multiarch}", f"/usr/lib/{multiarch}"), ("/lib64", "/usr/lib64")):
        for candidate in candidates:  # Debian-style multiarch dirs, else RHEL-style lib64
            real = os.path.realpath(candidate)
            if os.path.isdir(real) and real not in host_lib_dirs:
                host_lib_dirs.append(real)
        if host_lib_dirs:
            break
    for i, host_dir in enumerate(host_lib_dirs):
        dest = f"{PREFIX}/lib" if i == 0 else f"{PREFIX}/lib{i + 1}"
        mounts.append((host_dir, dest))
        library_path.append(dest)

    interp = elf_interpreter(python)
    if interp is None:
        raise InjectError(f"{python} is statically linked; inject it without a loader")
    mounts.append((os.path.realpath(interp), f"{PREFIX}/ld.so"))
    source = compile_agent(agent, compiled_dir) if compiled_dir is not None else agent
    mounts.append((str(source), f"{PREFIX}/agent/agent.py"))

    argv = (
        f"{PREFIX}/ld.so",
        "--library-path",
        ":".join(library_path),
        f"{PREFIX}/py/bin/python3",
        "-I",
        "-S",
        f"{PREFIX}/agent/agent.py",
    )
    return AgentMount(mounts=tuple(mounts), argv=argv)


def host_agent_mount(compiled_dir: Path | None = None) -> AgentMount:
    """The agent mount for this host's interpreter and the installed agent (``corral.agent``)."""
    return build_agent_mount(compiled_dir=compiled_dir)
