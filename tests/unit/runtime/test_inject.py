from __future__ import annotations

import sys
from pathlib import Path

import pytest

from corral.runtime.inject import InjectError, build_agent_mount, elf_interpreter


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    path = tmp_path / "agent.py"
    path.write_text("print('agent')\n")
    return path


def test_layout_lets_python_find_its_prefix(agent: Path) -> None:
    mount = build_agent_mount(agent)
    dest = {d: s for s, d in mount.mounts}
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert (Path(dest[f"/.corral/py/lib/{version}"]) / "os.py").exists()  # the prefix landmark
    assert (Path(dest[f"/.corral/py/lib/{version}"]) / "lib-dynload").is_dir()
    assert dest["/.corral/agent/agent.py"] == str(agent)
    assert Path(dest["/.corral/ld.so"]).exists()
    assert all(Path(source).exists() for source, _ in mount.mounts)


def test_argv_runs_the_agent_through_the_host_loader(agent: Path) -> None:
    argv = build_agent_mount(agent).argv
    assert argv[:2] == ("/.corral/ld.so", "--library-path")
    assert argv[2].split(":")[0] == "/.corral/py/lib"
    assert "/.corral/lib" in argv[2].split(":")
    assert argv[3:] == ("/.corral/py/bin/python3", "-I", "-S", "/.corral/agent/agent.py")


def test_no_library_path_leaks_into_the_environment(agent: Path) -> None:
    assert dict(build_agent_mount(agent).env).get("LD_LIBRARY_PATH") is None


def test_missing_agent_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InjectError, match="does not exist"):
        build_agent_mount(tmp_path / "nope.py")


def test_elf_interpreter_of_this_python() -> None:
    interp = elf_interpreter(Path(sys.executable).resolve())
    assert interp is not None and "ld-linux" in interp


def test_elf_interpreter_rejects_non_elf(agent: Path) -> None:
    with pytest.raises(InjectError):
        elf_interpreter(agent)


def test_compiled_agent_runs_under_its_script_name(tmp_path: Path) -> None:
    import subprocess

    from corral.runtime.inject import compile_agent

    script = tmp_path / "agent.py"
    script.write_text("import sys\nprint('ran', sys.argv[1])\n")
    compiled = compile_agent(script, tmp_path / "cache")
    assert compile_agent(script, tmp_path / "cache") == compiled  # cached by content
    # Mounted in the sandbox as agent.py: CPython runs it by its magic number.
    as_script = tmp_path / "mounted" / "agent.py"
    as_script.parent.mkdir()
    as_script.write_bytes(compiled.read_bytes())
    out = subprocess.run(
        [sys.executable, "-I", "-S", str(as_script), "x"], capture_output=True, text=True
    )
    assert out.stdout == "ran x\n"
    script.write_text("print('changed')\n")
    assert compile_agent(script, tmp_path / "cache") != compiled
    mount = build_agent_mount(script, compiled_dir=tmp_path / "cache")
    assert dict((d, s) for s, d in mount.mounts)["/.corral/agent/agent.py"].endswith(".pyc")
