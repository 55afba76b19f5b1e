"""The agent's own wire helpers agree with the standard library modules they replace.

The agent avoids importing ``json``, ``urllib.parse`` and ``http.server`` (their imports cost
tens of milliseconds of every sandbox start in gVisor); these tests pin its replacements to the
originals' behaviour.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qsl, unquote

import pytest

from corral.agent import jsonio, wire


@pytest.mark.parametrize(
    "text",
    ["plain", "a%20b", "caf%C3%A9", "%ff%fe", "100%", "%zz%41", "%4", "x%e2%82", "é%41", ""],
)
def test_unquote_matches_urllib(text: str) -> None:
    assert wire.unquote(text) == unquote(text, errors="surrogateescape")


@pytest.mark.parametrize(
    "query",
    ["path=/a%20b&depth=2", "path=&x", "a=1&a=2", "p=caf%E9+x", "&&flag=true&", "k=v=w"],
)
def test_parse_query_matches_urllib(query: str) -> None:
    expected = dict(parse_qsl(query, keep_blank_values=True, errors="surrogateescape"))
    assert wire.parse_query(query) == expected


@pytest.mark.parametrize(
    "value",
    [
        {"cmd": ["echo", "hi"], "env": {"K": "\udcff é"}, "timeout": 2.5, "stdin": False},
        {"n": None, "t": True, "big": 2**70, "f": -1e-9, "nested": [[{}], []]},
        {"nan": float("inf")},
    ],
)
def test_json_round_trip_matches_json(value: object) -> None:
    encoded = jsonio.json_dumps(value)
    assert encoded == json.dumps(value, separators=(",", ":")).encode()
    assert jsonio.json_loads(b"  " + encoded + b"\n") == json.loads(encoded)


@pytest.mark.parametrize("raw", [b"{", b"[1] x", b"\xff", b"", b"nul"])
def test_json_errors_are_json_errors(raw: bytes) -> None:
    with pytest.raises(ValueError) as mine:
        jsonio.json_loads(raw)
    with pytest.raises(ValueError) as theirs:
        json.loads(raw)
    assert str(mine.value) == str(theirs.value)


def test_json_loads_takes_a_bom() -> None:
    assert jsonio.json_loads(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}
