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
