"""The SDK's HTTP session: the TLS context every client of a process shares."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from corral.sdk import AsyncClient, _http


@pytest.fixture
def context_builds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every verifying context built (each loads the CA bundle), from a fresh process state."""
    built: list[Any] = []
    real = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(args or kwargs)
        return real(*args, **kwargs)

    _http._verifying_tls.cache_clear()
    _http._no_tls.cache_clear()
    monkeypatch.setattr(ssl, "create_default_context", counting)
    yield built
    _http._verifying_tls.cache_clear()
    _http._no_tls.cache_clear()


async def test_clients_of_a_plain_http_daemon_load_no_ca_bundle(context_builds: list[Any]) -> None:
    clients = [AsyncClient("http://127.0.0.1:7070", "k") for _ in range(3)]
    for client in clients:
        await client.aclose()
    assert context_builds == []


async def test_https_clients_verify_and_share_one_context(context_builds: list[Any]) -> None:
    clients = [AsyncClient("https://corral.example:7070", "k") for _ in range(3)]
    for client in clients:
        await client.aclose()
    assert len(context_builds) == 1
    context = _http.tls_context("HTTPS://corral.example")
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context is _http.tls_context("https://other.example")
