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

__all__ = ["CLIState", "client", "parse_duration", "parse_pairs", "print_json", "state"]


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


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str, option: str) -> float:
    """`90`, `45s`, `15m`, `1h`, `30d`, `2w` → seconds; anything else is a usage error."""
    value = text.strip().lower()
    unit = _UNITS.get(value[-1:], 0) if value else 0
    number = value[:-1] if unit else value
    try:
        seconds = float(number) * (unit or 1)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise typer.BadParameter(
            f"expected a duration such as 90, 45s, 15m, 1h, 30d; got {text!r}", param_hint=option
        )
    return seconds
