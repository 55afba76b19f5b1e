"""The code interpreter end to end: a template built `--with code-interpreter` (real pip
installs in a real build sandbox), then `run_code` through the SDK and `corral run-code`, in real
gVisor sandboxes: state, contexts, plots, errors, timeouts, streaming, bounds, park/wake/fork.

The template is built once per test session (the slow part: 1-6 minutes, mostly pip), in the
background from the session's start, in a daemon of its own (conftest ``BackgroundBuilds``);
every test then shares it, and most share one sandbox.
"""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import threading
from collections.abc import Iterator

import pytest

from corral import Sandbox
from corral.sdk.code import OutputMessage
from corral.sdk.errors import Conflict, CorralError, InvalidRequest, NotFound
from tests.e2e.conftest import CORRAL, BackgroundBuilds, Daemon
from tests.mcp_text import first_text

TEMPLATE = "ci"
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def daemon(builds: BackgroundBuilds) -> Daemon:
    """The daemon the code template was built in (in the background, from the session's start)."""
    return builds.daemon


@pytest.fixture(scope="module")
def sbx(daemon: Daemon, code_template: str) -> Iterator[Sandbox]:
    with Sandbox.create(template=code_template, url=daemon.url, api_key=daemon.key) as sandbox:
        yield sandbox


def _png_size(data: str) -> tuple[int, int]:
    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR"
    width, height = struct.unpack(">II", raw[16:24])
    return width, height


def test_warm_template_has_a_ready_kernel_and_state_persists(sbx: Sandbox) -> None:
    # Restored from the warm checkpoint: the default Python context exists before any run.
    assert [c.language for c in sbx.code.list_contexts()] == ["python"]
    first = sbx.run_code("x = 41")
    assert first.error is None and first.results == []
    second = sbx.run_code("x + 1")
    assert second.text == "42"
    assert second.execution_count == first.execution_count + 1  # type: ignore[operator]


def test_contexts_keep_their_own_state(sbx: Sandbox) -> None:
    sbx.run_code("y = 'default'")
    ctx = sbx.code.create_context(cwd="/tmp")
    assert (ctx.language, ctx.cwd) == ("python", "/tmp")
    assert sbx.run_code("import os; os.getcwd()", context=ctx).text == "'/tmp'"
    missing = sbx.run_code("y", context=ctx)
    assert missing.error is not None and missing.error.name == "NameError"
    sbx.run_code("y = 'mine'", context=ctx)
    assert sbx.run_code("y").text == "'default'"
    assert ctx.id in [c.id for c in sbx.code.list_contexts()]
    sbx.code.restart_context(ctx)
    assert sbx.run_code("y", context=ctx).error is not None  # a fresh kernel
    sbx.code.remove_context(ctx)
    with pytest.raises(NotFound):
        sbx.run_code("1", context=ctx)
    bash = sbx.code.create_context(language="bash")
    sbx.run_code("GREETING=hello", context=bash)
    out = sbx.run_code("echo $GREETING from bash", context=bash)
    assert out.logs.stdout == ["hello from bash\n"]
    assert sbx.run_code("echo $MODE", language="bash", env={"MODE": "once"}).logs.stdout == [
        "once\n"
    ]
    assert sbx.run_code("echo ${MODE-unset}", language="bash").logs.stdout == ["unset\n"]


def test_plots_dataframes_and_errors(sbx: Sandbox) -> None:
    plot = sbx.run_code(
        # The inline backend crops to the drawing ("tight") unless told not to: then the PNG
        # is the figure's size, 3 x 2 inches at 100 dpi.
        "%config InlineBackend.print_figure_kwargs = {'bbox_inches': None}\n"
        "import matplotlib.pyplot as plt\n"
        "fig = plt.figure(figsize=(3, 2), dpi=100)\n"
        "plt.plot([1, 2, 3], [4, 1, 9])\n"
        "plt.show()"
    )
    assert plot.error is None
    pngs = [r.png for r in plot.results if r.png]
    assert len(pngs) == 1 and _png_size(pngs[0]) == (300, 200)
    frame = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    main = next(r for r in frame.results if r.is_main_result)
    assert main.html is not None and "<table" in main.html and main.text is not None
    failed = sbx.run_code("def f():\n    return 1 / 0\nf()")
    assert failed.error is not None
    assert (failed.error.name, failed.error.value) == ("ZeroDivisionError", "division by zero")
    assert "return 1 / 0" in failed.error.traceback and "\x1b[" not in failed.error.traceback


def test_timeout_interrupts_and_the_context_survives(sbx: Sandbox) -> None:
    sbx.run_code("kept = 'still here'")
    stuck = sbx.run_code("while True:\n    pass", timeout=2)
    assert stuck.error is not None and stuck.error.name == "TimeoutError"
    assert "keeps its state" in stuck.error.value
    assert sbx.run_code("kept").text == "'still here'"


def test_output_streams_while_the_code_runs(sbx: Sandbox, daemon: Daemon) -> None:
    # The code waits for a file that the test writes only after it has seen the first line:
    # without streaming, the first line would come at the end and the code would wait in vain.
    seen = threading.Event()

    def on_stdout(message: OutputMessage) -> None:
        if "first" in message.line:
            seen.set()

    def release() -> None:
        if seen.wait(120):
            subprocess.run(
                [CORRAL, "files", "write", sbx.id, "/tmp/go"], input=b"1", env=daemon.env
            )

    helper = threading.Thread(target=release)
    helper.start()
    run = sbx.run_code(
        "import os, time\nprint('first', flush=True)\n"
        "for _ in range(600):\n"
        "    if os.path.exists('/tmp/go'): break\n"
        "    time.sleep(0.1)\n"
        "print('released' if os.path.exists('/tmp/go') else 'never released')",
        on_stdout=on_stdout,
    )
    helper.join()
    assert "".join(run.logs.stdout) == "first\nreleased\n"


def test_many_megabytes_of_output_are_bounded(sbx: Sandbox) -> None:
    run = sbx.run_code("for _ in range(50):\n    print('x' * (1 << 20))\n'done'")
    out = "".join(run.logs.stdout)
    assert 8 * (1 << 20) - 64 <= len(out) <= 8 * (1 << 20) + 64
    assert "output over 8 MiB" in "".join(run.logs.stderr)
    assert run.text == "'done'"
    assert sbx.run_code("1 + 1").text == "2"


def test_bad_input_is_refused_clearly(sbx: Sandbox, daemon: Daemon) -> None:
    with pytest.raises(InvalidRequest, match=r"no kernel for language 'cobol'.*installed: bash"):
        sbx.run_code("DISPLAY 'HI'", language="cobol")
    with pytest.raises(NotFound):
        sbx.run_code("1", context="0123456789abcdef")
    with (
        Sandbox.create(url=daemon.url, api_key=daemon.key, memory_mib=256) as plain,
        pytest.raises(Conflict, match=r"no code interpreter.*--with code-interpreter"),
    ):
        plain.run_code("1")


def test_cli_run_code(sbx: Sandbox, daemon: Daemon) -> None:
    done = daemon.cli("run-code", sbx.id, "-c", "answer = 6 * 7\nprint('hi')\nanswer")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "hi\n42\n"
    piped = daemon.cli("run-code", sbx.id, "-", input=b"answer + 1")
    assert piped.stdout.decode() == "43\n"
    failed = daemon.cli("run-code", sbx.id, "-c", "raise ValueError('nope')")
    assert failed.returncode == 1 and b"ValueError: nope" in failed.stderr
    slow = daemon.cli("run-code", sbx.id, "--timeout", "1", "-c", "import time; time.sleep(30)")
    assert slow.returncode == 124
    as_json = daemon.cli("run-code", sbx.id, "--json", "-c", "answer")
    assert json.loads(as_json.stdout)["results"][0]["text"] == "42"


def test_the_agent_restarts_a_dead_interpreter(daemon: Daemon, code_template: str) -> None:
    with Sandbox.create(template=code_template, url=daemon.url, api_key=daemon.key) as box:
        assert box.run_code("1").text == "1"
        killed = box.exec("kill -9 $(pgrep -f 'python3 -m corral_interpreter$' | head -1)")
        assert killed.exit_code == 0
        # The server comes back (a new default kernel: the old state is gone, as on a crash).
        assert box.run_code("2 + 2").text == "4"


def test_context_state_survives_park_wake_and_is_copied_by_fork(
    daemon: Daemon, code_template: str
) -> None:
    with Sandbox.create(template=code_template, url=daemon.url, api_key=daemon.key) as box:
        box.run_code("counter = 41")
        named = box.code.create_context()
        box.run_code("label = 'named'", context=named)
        box.park()
        box.wake()
        assert box.run_code("counter + 1").text == "42"
        assert box.run_code("label", context=named).text == "'named'"
        forks = box.fork(2)
        try:
            forks[0].run_code("counter = 100")
            assert forks[1].run_code("counter").text == "41"
            assert forks[0].run_code("counter").text == "100"
            assert forks[1].run_code("label", context=named.id).text == "'named'"
            assert box.run_code("counter").text == "41"
        finally:
            for fork in forks:
                fork.kill()


def test_a_sandbox_killed_during_an_execution_ends_it(daemon: Daemon, code_template: str) -> None:
    box = Sandbox.create(template=code_template, url=daemon.url, api_key=daemon.key)
    started = threading.Event()
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(
                box.run_code(
                    "import time\nprint('go', flush=True)\ntime.sleep(600)",
                    on_stdout=lambda _m: started.set(),
                )
            )
        except CorralError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    assert started.wait(120)
    box.kill()
    worker.join(120)
    assert not worker.is_alive(), "run_code hung after its sandbox was killed"
    ended = outcome[0]
    if not isinstance(ended, CorralError):
        assert getattr(ended, "error", None) is not None
        assert ended.error.name == "ExecutionInterrupted"  # type: ignore[attr-defined]
        assert "killed" in ended.error.value  # type: ignore[attr-defined]


async def test_mcp_run_code_keeps_state_and_returns_plots_as_images(
    daemon: Daemon, code_template: str
) -> None:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=CORRAL, args=["mcp", "--template", code_template], env=daemon.env
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        first = await session.call_tool("run_code", {"code": "total = 40"})
        second = await session.call_tool("run_code", {"code": "total + 2"})
        answer = json.loads(first_text(second))
        assert answer["results"] == ["42"] and answer["error"] is None
        plot = await session.call_tool(
            "run_code",
            {
                "code": "%config InlineBackend.print_figure_kwargs = {'bbox_inches': None}\n"
                "import matplotlib.pyplot as plt\n"
                "plt.figure(figsize=(2, 1), dpi=100); plt.plot([0, 1]); plt.show()"
            },
        )
        images = [c for c in plot.content if c.type == "image"]
        assert len(images) == 1 and images[0].mime_type == "image/png"
        assert _png_size(images[0].data) == (200, 100)
        failed = await session.call_tool("run_code", {"code": "undefined_name"})
        assert json.loads(first_text(failed))["error"]["name"] == "NameError"
        sandbox_id = json.loads(first_text(first))["sandbox_id"]
        await session.call_tool("kill_sandbox", {"sandbox_id": sandbox_id})
