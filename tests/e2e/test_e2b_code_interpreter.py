"""The official `e2b-code-interpreter` SDK, unchanged, against corral (sync and async).

It reaches the sandbox's code interpreter (port 49999, corral's server speaking E2B's
`/execute` and contexts API) through the E2B front, addressed by `E2b-Sandbox-Id` /
`E2b-Sandbox-Port` with the sandbox's tokens, in a template built `--with code-interpreter`
(the session's shared `code_template`). The one module for the official SDK against the code
interpreter (``test_code_interpreter.py`` drives corral's own SDK, CLI and MCP).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterator

import pytest
from e2b import NotFoundException, SandboxException, TimeoutException
from e2b_code_interpreter import AsyncSandbox, Sandbox

from tests.e2e.conftest import BackgroundBuilds, Daemon

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def daemon(builds: BackgroundBuilds) -> Daemon:
    """The daemon the code template was built in (in the background, from the session's start)."""
    return builds.daemon


@pytest.fixture(scope="module")
def e2b_env(daemon: Daemon) -> dict[str, str]:
    out = daemon.cli("e2b", "env")
    assert out.returncode == 0, out.stderr.decode()
    found = {}
    for line in out.stdout.decode().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        found[name] = value.strip("'")
    return found


@pytest.fixture(autouse=True)
def _e2b_settings(e2b_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in e2b_env.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def sbx(e2b_env: dict[str, str], code_template: str) -> Iterator[Sandbox]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in e2b_env.items():
            patch.setenv(name, value)
        sandbox = Sandbox.create(code_template, timeout=600)
    try:
        yield sandbox
    finally:
        sandbox.kill()


def png_size(data: str) -> tuple[int, int]:
    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", raw[16:24])
    return width, height


def test_state_results_and_streamed_logs(sbx: Sandbox) -> None:
    first = sbx.run_code("x = 41")
    done = sbx.run_code("x + 1")
    assert done.text == "42"
    assert done.execution_count == first.execution_count + 1  # type: ignore[operator]
    lines: list[str] = []
    run = sbx.run_code(
        "import sys\nprint('out')\nprint('err', file=sys.stderr)",
        on_stdout=lambda m: lines.append(m.line),
    )
    assert (run.logs.stdout, run.logs.stderr) == (["out\n"], ["err\n"])
    assert lines == ["out\n"]


def test_plots_dataframes_and_errors(sbx: Sandbox) -> None:
    plot = sbx.run_code(
        "%config InlineBackend.print_figure_kwargs = {'bbox_inches': None}\n"
        "import matplotlib.pyplot as plt\n"
        "plt.figure(figsize=(3, 2), dpi=100)\n"
        "plt.plot([1, 2, 3], [4, 1, 9])\n"
        "plt.show()"
    )
    pngs = [r.png for r in plot.results if r.png]
    assert len(pngs) == 1 and png_size(pngs[0]) == (300, 200)
    frame = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
    assert frame.results[0].html is not None and "<table" in frame.results[0].html
    failed = sbx.run_code("1 / 0")
    assert failed.error is not None
    assert (failed.error.name, failed.error.value) == ("ZeroDivisionError", "division by zero")
    assert "1 / 0" in failed.error.traceback


def test_contexts(sbx: Sandbox) -> None:
    sbx.run_code("where = 'default'")
    ctx = sbx.create_code_context(cwd="/tmp")
    assert sbx.run_code("import os; os.getcwd()", context=ctx).text == "'/tmp'"
    assert sbx.run_code("where", context=ctx).error is not None
    assert ctx.id in {c.id for c in sbx.list_code_contexts()}
    sbx.restart_code_context(ctx)
    sbx.remove_code_context(ctx)
    assert ctx.id not in {c.id for c in sbx.list_code_contexts()}
    with pytest.raises(NotFoundException):
        sbx.run_code("1", context=ctx)
    bash = sbx.create_code_context(language="bash")
    assert sbx.run_code("echo hi from bash", context=bash).logs.stdout == ["hi from bash\n"]
    by_name = sbx.run_code("echo $GREETING", language="bash", envs={"GREETING": "hello"})
    assert by_name.logs.stdout == ["hello\n"]
    assert sbx.run_code("where").text == "'default'"


def test_bad_language_and_unended_code(sbx: Sandbox) -> None:
    with pytest.raises(SandboxException):
        sbx.run_code("1", language="cobol")
    sbx.run_code("kept = 40")
    with pytest.raises(TimeoutException):  # the SDK gives up reading; the server interrupts
        sbx.run_code("while True:\n    pass", timeout=2)
    assert sbx.run_code("kept + 2").text == "42"  # interrupted, the context keeps its state


async def test_async_sdk(code_template: str) -> None:
    sandbox = await AsyncSandbox.create(code_template, timeout=120)
    try:
        await sandbox.run_code("y = 6")
        assert (await sandbox.run_code("y * 7")).text == "42"
    finally:
        await sandbox.kill()
    with pytest.raises(SandboxException):
        await sandbox.run_code("1", timeout=10)
