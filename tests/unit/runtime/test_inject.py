from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from corral.agent import AGENT_DIR
from corral.runtime.inject import (
    InjectError,
    build_agent_mount,
    compile_agent,
    elf_interpreter,
    go_agent_mount,
    host_agent_mount,
)


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    path = tmp_path / "agent.py"
    path.write_text("print('agent')\n")
    return path


def test_layout_lets_python_find_its_prefix(agent: Path, tmp_path: Path) -> None:
    mount = build_agent_mount(agent, compiled_dir=tmp_path / "rt")
    dest = {d: s for s, d in mount.mounts}
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    py_lib = Path(dest["/.corral/py"]) / "lib" / version
    assert (py_lib / "os.py").exists()  # the prefix landmark
    assert (py_lib / "lib-dynload").is_dir()
    assert (Path(dest["/.corral/py"]) / "bin" / "python3").is_file()
    assert dest["/.corral/agent/agent.py"] == str(agent)
    assert Path(dest["/.corral/ld.so"]).exists()
    assert all(Path(source).exists() for source, _ in mount.mounts)


def test_only_a_private_copy_of_what_the_agent_imports_is_bound(tmp_path: Path) -> None:
    mount = build_agent_mount(compiled_dir=tmp_path / "rt")
    sources = [Path(s) for s, _ in mount.mounts]
    assert all(s.is_relative_to(tmp_path / "rt") for s in sources)  # nothing of the host itself
    py = {d: Path(s) for s, d in mount.mounts}["/.corral/py"]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    py_lib = py / "lib" / version
    assert not list(py.rglob("site-packages")) and not list(py.rglob("dist-packages"))
    assert (py_lib / "subprocess.py").is_file() and (py_lib / "encodings").is_dir()
    assert not (py_lib / "tkinter").exists() and not (py_lib / "asyncio").exists()
    libs = {p.name for p in ({d: Path(s) for s, d in mount.mounts}["/.corral/lib"]).iterdir()}
    assert "libc.so.6" in libs and len(libs) < 20
    # Built once: a second daemon start reuses the same root.
    assert build_agent_mount(compiled_dir=tmp_path / "rt").mounts == mount.mounts


def test_the_private_copy_runs_the_agents_imports(tmp_path: Path) -> None:
    mount = build_agent_mount(compiled_dir=tmp_path / "rt")
    dest = {d: s for s, d in mount.mounts}
    imports = "import subprocess, pwd, shutil, signal, traceback, json, ctypes, _socket"
    out = subprocess.run(
        [
            dest["/.corral/ld.so"],
            "--library-path",
            dest["/.corral/lib"],
            str(Path(dest["/.corral/py"]) / "bin" / "python3"),
            "-I",
            "-S",
            "-c",
            imports + "; import sys; print(sys.prefix)",
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert (out.returncode, out.stdout.strip()) == (0, dest["/.corral/py"]), out.stderr


def test_argv_runs_the_agent_through_the_host_loader(agent: Path, tmp_path: Path) -> None:
    argv = build_agent_mount(agent, compiled_dir=tmp_path).argv
    assert argv[:3] == ("/.corral/ld.so", "--library-path", "/.corral/lib")
    assert argv[3:] == ("/.corral/py/bin/python3", "-I", "-S", "/.corral/agent/agent.py")


def test_no_library_path_leaks_into_the_environment(agent: Path, tmp_path: Path) -> None:
    assert dict(build_agent_mount(agent, compiled_dir=tmp_path).env).get("LD_LIBRARY_PATH") is None


def test_missing_agent_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InjectError, match="does not exist"):
        build_agent_mount(tmp_path / "nope.py", compiled_dir=tmp_path)


def test_elf_interpreter_of_this_python() -> None:
    interp = elf_interpreter(Path(sys.executable).resolve())
    assert interp is not None and "ld-linux" in interp


def test_elf_interpreter_rejects_non_elf(agent: Path) -> None:
    with pytest.raises(InjectError):
        elf_interpreter(agent)


def _package(root: Path, greeting: str) -> Path:
    package = root / "pkg"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("raise AssertionError('the daemon side, not the agent')\n")
    (package / "agent.py").write_text("raise AssertionError('the source tree launcher')\n")
    (package / "main.py").write_text(
        "import sys\nfrom .words import WORD\n\n"
        "def main():\n    print(WORD, sys.argv[1], __name__, __package__)\n    return 3\n"
    )
    (package / "words.py").write_text(f"WORD = {greeting!r}\n")
    return package


def test_agent_package_runs_as_one_bytecode_file_under_its_script_name(tmp_path: Path) -> None:
    package = _package(tmp_path, "ran")
    compiled = compile_agent(package, tmp_path / "cache")
    assert compile_agent(package, tmp_path / "cache") == compiled  # cached by content
    # Mounted in the sandbox as agent.py: CPython runs it by its magic number.
    as_script = tmp_path / "mounted" / "agent.py"
    as_script.parent.mkdir()
    as_script.write_bytes(compiled.read_bytes())
    out = subprocess.run(
        [sys.executable, "-I", "-S", str(as_script), "x"], capture_output=True, text=True
    )
    assert (out.stdout, out.stderr, out.returncode) == ("ran x agent.main agent\n", "", 3)
    assert not list(as_script.parent.iterdir())[1:]  # nothing was compiled or written beside it
    _package(tmp_path, "changed")  # any module's change is a new build
    assert compile_agent(package, tmp_path / "cache") != compiled
    mount = build_agent_mount(package, compiled_dir=tmp_path / "cache")
    assert dict((d, s) for s, d in mount.mounts)["/.corral/agent/agent.py"].endswith(".pyc")


def test_agent_package_needs_a_build_directory(tmp_path: Path) -> None:
    with pytest.raises(InjectError, match="directory"):
        build_agent_mount(_package(tmp_path, "x"))


def test_the_real_agent_builds_and_answers_health(tmp_path: Path) -> None:
    compiled = compile_agent(AGENT_DIR, tmp_path / "cache")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        "CORRAL_AGENT_HOST": "127.0.0.1",
        "CORRAL_AGENT_PORT": str(port),
        "PATH": "/usr/bin:/bin",
    }
    key = "5a" * 32
    process = subprocess.Popen(
        [sys.executable, "-I", "-S", str(compiled)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None
    process.stdin.write(f"{key}\n".encode())  # the agent's key, as the runtime hands it over
    process.stdin.close()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/health", headers={"Authorization": f"Bearer {key}"}
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(request, timeout=1) as resp:
                    health = json.loads(resp.read())
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
        assert health["ok"] is True and health["pid"] == process.pid
    finally:
        process.kill()
        process.wait()
        assert process.stderr is not None
        process.stderr.close()


def test_both_agents_get_the_same_mounts_and_the_tools_interpreter(tmp_path: Path) -> None:
    """Whichever agent runs, a sandbox has the same mounts (a memory image restores under either
    setting) and the daemon's interpreter for its in-sandbox tools; only the init differs."""
    binary = tmp_path / "corral-agent"
    binary.write_bytes(b"\x7fELF")
    binary.chmod(0o755)
    python = host_agent_mount(tmp_path / "rt", go_binary=binary)
    go = go_agent_mount(tmp_path / "rt", binary=binary)
    assert go.mounts == python.mounts
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()[:16]
    kept = tmp_path / "rt" / "go" / digest / "corral-agent"
    assert kept.read_bytes() == binary.read_bytes()
    assert (str(kept), "/.corral/agent/corral-agent") in go.mounts
    assert (str(tmp_path / "rt" / "go"), "/.corral/agent/builds") in go.mounts
    assert go.argv == (f"/.corral/agent/builds/{digest}/corral-agent",)
    assert python.argv[-1] == "/.corral/agent/agent.py"
    tools = ("/.corral/ld.so", "--library-path", "/.corral/lib", "/.corral/py/bin/python3")
    assert go.tools == python.tools == (*tools, "-I", "-S")


def test_the_python_agent_goes_without_an_unbuilt_go_binary(tmp_path: Path) -> None:
    mount = host_agent_mount(tmp_path / "rt", go_binary=tmp_path / "absent")
    assert [d for _, d in mount.mounts if d.endswith("corral-agent")] == []
    with pytest.raises(InjectError, match="scripts/setup"):
        go_agent_mount(tmp_path / "rt", binary=tmp_path / "absent")


def test_a_rebuilt_go_agent_keeps_the_builds_memory_images_map(tmp_path: Path) -> None:
    """A parked sandbox's memory image maps the agent build it started from: after a rebuild
    (an upgrade) that build is still mounted where the image has it, beside the new one, which
    new sandboxes run; the mounts stay the same set, so old and new images both restore."""
    binary = tmp_path / "corral-agent"
    binary.write_bytes(b"\x7fELF build one")
    binary.chmod(0o755)
    first = go_agent_mount(tmp_path / "rt", binary=binary)
    binary.write_bytes(b"\x7fELF build two, rebuilt in place")
    second = go_agent_mount(tmp_path / "rt", binary=binary)
    assert [t for _, t in first.mounts] == [t for _, t in second.mounts]
    assert first.argv != second.argv
    builds = tmp_path / "rt" / "go"
    for mount, content in ((first, b"\x7fELF build one"), (second, b"\x7fELF build two")):
        in_sandbox = mount.argv[0].removeprefix("/.corral/agent/builds/")
        assert (builds / in_sandbox).read_bytes().startswith(content)
    assert sorted(p.name for p in builds.iterdir()) == sorted(
        a.argv[0].split("/")[-2] for a in (first, second)
    )  # nothing half-made left beside them
    again = go_agent_mount(tmp_path / "rt", binary=binary)
    assert again == second  # kept once, not copied again
