"""What every verb shares: the client built from the global options, and argument helpers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    import httpx

    from corral.sdk import Client

__all__ = ["CLIState", "client", "parse_pairs", "print_json", "state"]


@dataclass
class CLIState:
    """Global options; the client is built on first use and closed when the command ends.

    Tests pass an instance with a `transport` as the click context's `obj`.
    """

    url: str | None = None
    api_key: str | None = None
    transport: httpx.AsyncBaseTransport | None = None
    _client: Client | None = field(default=None, repr=False)

    def client(self) -> Client:
        if self._client is None:
            from corral.sdk import Client

            self._client = Client(self.url, self.api_key, transport=self.transport)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def state(ctx: typer.Context) -> CLIState:
    found = ctx.find_object(CLIState)
    if found is None:  # a verb invoked without the root callback (not via `corral`)
        found = ctx.ensure_object(CLIState)
    return found


def client(ctx: typer.Context) -> Client:
    return state(ctx).client()


def parse_pairs(pairs: Sequence[str] | None, option: str) -> dict[str, str]:
    """`["K=V", ...]` → `{"K": "V"}`; a pair without `=` is a usage error (exit 2)."""
    parsed: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint=option)
        parsed[key] = value
    return parsed


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True))
