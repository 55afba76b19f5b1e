"""Error translation: daemon answers and transport failures become the SDK's exception tree."""

from __future__ import annotations

import httpx
import pytest

import corral
from corral import sdk
from corral.sdk import (
    APIError,
    AuthenticationError,
    CapacityError,
    ConfigurationError,
    Conflict,
    ConnectionFailed,
    CorralError,
    ExecFailed,
    InvalidRequest,
    NotFound,
    Sandbox,
    SandboxUnavailable,
)
from corral.sdk.config import resolve_api_key, resolve_url
from corral.sdk.errors import error_from_response
from corral.sdk.testing import FakeDaemon


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (401, "unauthorized", AuthenticationError),
        (404, "not_found", NotFound),
        (409, "conflict", Conflict),
        (409, "capacity", CapacityError),
        (422, "invalid", InvalidRequest),
        (400, "exec_failed", ExecFailed),
        (503, "sandbox_unavailable", SandboxUnavailable),
        (500, "internal", APIError),
    ],
)
def test_error_codes_map_to_exceptions(status: int, code: str, expected: type) -> None:
    error = error_from_response(status, {"code": code, "message": "it went wrong"})
    assert type(error) is expected
    assert isinstance(error, CorralError)
    assert (error.status, error.code, str(error)) == (status, code, "it went wrong")


def test_fastapi_validation_detail_becomes_one_line() -> None:
    detail = [{"loc": ["body", "cpu"], "msg": "Input should be greater than 0"}]
    error = error_from_response(422, {"detail": detail})
    assert isinstance(error, InvalidRequest)
    assert str(error) == "cpu: Input should be greater than 0"


def test_status_decides_when_the_body_has_no_code() -> None:
    assert isinstance(error_from_response(404, "no such thing"), NotFound)
    assert isinstance(error_from_response(502, {}), SandboxUnavailable)


def test_every_sdk_error_is_a_corral_error() -> None:
    for cls in (APIError, ConnectionFailed, ConfigurationError, NotFound, ExecFailed):
        assert issubclass(cls, CorralError)


def test_wrong_api_key_raises_authentication_error() -> None:
    fake = FakeDaemon()
    with pytest.raises(AuthenticationError):
        Sandbox.create(api_key="wrong", transport=fake.transport)


def test_unreachable_daemon_names_the_url_and_how_to_start_it() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(ConnectionFailed) as caught:
        Sandbox.create(url="http://127.0.0.1:9", api_key="k", transport=httpx.MockTransport(refuse))
    message = str(caught.value)
    assert "http://127.0.0.1:9" in message
    assert "corral serve" in message
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


def test_capacity_refusal_carries_the_daemons_message() -> None:
    fake = FakeDaemon()
    with pytest.raises(CapacityError, match="over the free"):
        Sandbox.create(memory_mib=9000, api_key=fake.api_key, transport=fake.transport)


def test_config_order_argument_then_env_then_default(tmp_path) -> None:  # type: ignore[no-untyped-def]
    key_file = tmp_path / "admin.key"
    assert resolve_url(None, {}) == "http://127.0.0.1:7070"
    assert resolve_url(None, {"CORRAL_URL": "http://h:1/"}) == "http://h:1"
    assert resolve_url("http://x:2", {"CORRAL_URL": "http://h:1"}) == "http://x:2"
    assert resolve_api_key("arg", {"CORRAL_API_KEY": "env"}, key_file) == "arg"
    assert resolve_api_key(None, {"CORRAL_API_KEY": "env"}, key_file) == "env"
    key_file.write_text("from-file\n")
    assert resolve_api_key(None, {}, key_file) == "from-file"


def test_missing_api_key_says_how_to_set_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigurationError, match="CORRAL_API_KEY"):
        resolve_api_key(None, {}, tmp_path / "absent.key")


def test_public_exports() -> None:
    for name in ("Sandbox", "AsyncSandbox", "CorralError", "APIError", "NotFound"):
        assert name in corral.__all__
        assert getattr(corral, name) is getattr(sdk, name)
    assert sorted(sdk.__all__) == sorted(set(sdk.__all__))
    for name in sdk.__all__:
        assert hasattr(sdk, name)
