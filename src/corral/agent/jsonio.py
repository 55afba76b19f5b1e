"""JSON in and out by the C accelerator under ``json``, without importing ``json`` itself.

``import json`` pulls in ``re``, ``enum`` and more: tens of milliseconds of every sandbox start in
gVisor. ``json_dumps`` and ``json_loads`` give the same results as ``json.dumps(value,
separators=(",", ":")).encode()`` and ``json.loads`` (tests/unit/agent/test_wire.py pins them);
only an unusual input (not UTF-8, a BOM, an error to explain) falls back to the json module.
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class _JsonContext:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder``: the defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
    parse_constant = parse_constant.__getitem__  # type: ignore[assignment]


_scan_json = _json.make_scanner(_JsonContext())  # type: ignore[arg-type]
_JSON_SPACE = " \t\n\r"


def _not_serializable(value: object) -> None:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def json_dumps(value: Any) -> bytes:
    """``json.dumps(value, separators=(",", ":")).encode()``, by json's own C encoder."""
    encode = _json.make_encoder(
        None, _not_serializable, _json.encode_basestring_ascii, None, ":", ",", False, False, True
    )
    return "".join(encode(value, 0)).encode()


def json_loads(raw: bytes) -> Any:
    """``json.loads(raw)``, by json's own C scanner; anything unusual (not UTF-8, a BOM, an
    error to explain) is handed to the json module itself."""
    try:
        text = raw.decode("utf-8")
        start = len(text) - len(text.lstrip(_JSON_SPACE))
        value, end = _scan_json(text, start)
        if not text[end:].strip(_JSON_SPACE):
            return value
    except (ValueError, StopIteration):
        pass
    import json

    return json.loads(raw)


def json_line(event: dict[str, Any]) -> bytes:
    return json_dumps(event) + b"\n"
