"""The error-code table (``corral.errcodes``) against every layer that speaks it: the service's
classes, the agent's answers, the API's statuses and bodies, the SDK's classes and the CLI."""

from __future__ import annotations

import ast
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

import corral.agent
from corral import sdk
from corral.agent.errors import _ERRNO_CODES
from corral.api.app import create_app
from corral.api.errors import install_error_handlers
from corral.cli._state import CLIState
from corral.cli.main import app as cli_app
from corral.errcodes import CODES, code_for_status, status_of
from corral.runtime.agent_client import AgentError
from corral.sdk.testing import FakeDaemon
from corral.service import errors as service_errors
from corral.service.sandboxes.agents import AGENT_CODES, translate_agent_error
from tests.unit.conftest import Harness


def _service_error_classes() -> list[type[service_errors.CorralError]]:
    """Every error class the service defines, its base included."""
    return [
        cls
        for cls in vars(service_errors).values()
        if isinstance(cls, type) and issubclass(cls, service_errors.CorralError)
    ]


def _service_error(code: str, message: str) -> service_errors.CorralError:
    """The service's own class for ``code`` where it has one, else its base with the code."""
    for cls in _service_error_classes():
        if cls is not service_errors.CorralError and cls.code == code:
            return cls(message)
    return service_errors.CorralError(message, code=code)


def _raising_app() -> FastAPI:
    """A route that raises the service error whose code is its path parameter."""
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/v1/sandboxes/{code}")
    async def fail(code: str) -> None:
        raise _service_error(code, f"it failed with {code}")

    return app


def test_every_sdk_class_named_in_the_table_is_an_exported_api_error() -> None:
    for entry in CODES.values():
        cls = getattr(sdk, entry.sdk_error)
        assert issubclass(cls, sdk.APIError), entry
        assert entry.sdk_error in sdk.__all__


@pytest.mark.parametrize("code", sorted(CODES))
async def test_a_service_error_reaches_the_sdk_as_its_class_with_its_message(code: str) -> None:
    entry = CODES[code]
    transport = httpx.ASGITransport(app=_raising_app())
    async with sdk.AsyncClient(url="http://corral", api_key="k", transport=transport) as client:
        with pytest.raises(sdk.APIError) as caught:
            await client.get_sandbox_info(code)
    error = caught.value
    assert type(error).__name__ == entry.sdk_error
    assert (error.status, error.code, error.message) == (
        entry.status,
        code,
        f"it failed with {code}",
    )


async def test_the_api_body_is_code_and_message_with_the_tables_status() -> None:
    transport = httpx.ASGITransport(app=_raising_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://corral") as client:
        for code, entry in CODES.items():
            response = await client.get(f"/v1/sandboxes/{code}")
            assert response.status_code == entry.status
            assert response.json() == {"code": code, "message": f"it failed with {code}"}


def test_every_service_error_class_has_a_code_in_the_table() -> None:
    for cls in _service_error_classes():
        assert cls.code in CODES, cls


def _agent_raised_codes() -> set[tuple[int, str]]:
    """Every ``ApiError(status, "code", ...)`` written in the agent's source."""
    found = set()
    for path in Path(corral.agent.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "ApiError"
                and len(node.args) >= 2
                and all(isinstance(a, ast.Constant) for a in node.args[:2])
            ):
                found.add((node.args[0].value, node.args[1].value))  # type: ignore[attr-defined]
    return found


def test_the_agents_own_codes_are_the_tables() -> None:
    """The agent cannot import the table (it is built from its own package only): its copy of
    the codes must agree with it, and the service must accept each of them."""
    raised = _agent_raised_codes()
    assert len(raised) > 5  # the scan found the agent's raises
    errno_codes = set(_ERRNO_CODES.values())
    for status, code in errno_codes:
        assert CODES[code].status == status, code
    for _, code in raised | errno_codes | {(400, "bad_request")}:
        assert code in CODES, code
        # The agent's 401 (a request without its key) is the daemon's own failure, never the
        # caller's key error: it is reported as `internal`, as any code outside AGENT_CODES.
        if code not in ("internal", "unauthorized"):
            assert code in AGENT_CODES, code


@pytest.mark.parametrize("code", sorted(AGENT_CODES))
def test_an_agent_error_keeps_its_code_and_names_the_sandbox(code: str) -> None:
    translated = translate_agent_error("sb-1", AgentError("writing '/x': failed", code=code))
    assert translated.code == code
    assert status_of(translated.code) == CODES[code].status
    assert translated.message == "sandbox sb-1: writing '/x': failed"


def test_a_code_the_agent_may_not_send_becomes_internal() -> None:
    """The agent runs inside the sandbox: it cannot make the caller see, e.g., a key error."""
    for code in ("unauthorized", "forbidden", "capacity", "made_up"):
        translated = translate_agent_error("sb-1", AgentError("lies", code=code))
        assert translated.code == "internal"


def test_an_answer_with_only_a_status_gets_a_code() -> None:
    assert code_for_status(404) == "not_found"
    assert code_for_status(413) == "too_large"
    assert code_for_status(405) == "invalid"
    assert code_for_status(502) == "bad_gateway"
    assert code_for_status(501) == "internal"
    assert status_of("made_up") == 500


async def test_an_unexpected_exception_is_a_json_500(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> None:
        raise RuntimeError("opening /var/lib/corral/sandboxes/sb-1/console.log: I/O error")

    monkeypatch.setattr(harness.workspace.admission, "capacity", broken)
    app = create_app(harness.workspace, manage_lifespan=False)
    key = harness.settings.admin_key_path.read_text().strip()
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://corral", headers={"Authorization": f"Bearer {key}"}
    ) as client:
        response = await client.get("/v1/capacity")
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"code", "message"}
    assert body["code"] == "internal"
    assert "RuntimeError" in body["message"] and "GET /v1/capacity" in body["message"]
    assert "/var/lib" not in body["message"]  # the text may hold host paths: the log has it


def _cli(fake: FakeDaemon, *args: str, input: bytes | None = None) -> tuple[int, str]:
    state = CLIState(api_key=fake.api_key, transport=fake.transport)
    result = CliRunner().invoke(cli_app, list(args), input=input, obj=state)
    return result.exit_code, result.stderr


def test_the_cli_shows_permission_denied_as_a_permission_error_not_a_key_error() -> None:
    fake = FakeDaemon()
    sandbox_id = str(fake.add_sandbox()["id"])
    message = f"sandbox {sandbox_id}: writing '/etc/shadow': Permission denied"
    fake.fail_next = (403, "permission_denied", message)
    code, stderr = _cli(fake, "files", "write", sandbox_id, "/etc/shadow", input=b"x")
    assert code == 1
    assert stderr == f"error: {message}\n"
    assert "API key" not in stderr and "CORRAL_API_KEY" not in stderr


def test_the_cli_shows_a_full_disk_and_a_wrong_key_each_as_what_they_are() -> None:
    fake = FakeDaemon()
    sandbox_id = str(fake.add_sandbox()["id"])
    fake.fail_next = (507, "no_space", f"sandbox {sandbox_id}: writing '/big': No space left")
    code, stderr = _cli(fake, "files", "write", sandbox_id, "/big", input=b"x")
    assert (code, stderr) == (1, f"error: sandbox {sandbox_id}: writing '/big': No space left\n")

    fake.fail_next = (401, "unauthorized", "missing or wrong API key")
    code, stderr = _cli(fake, "ls")
    assert code == 1 and "CORRAL_API_KEY" in stderr
