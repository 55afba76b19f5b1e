"""Secret names and values as the store accepts them, and the placeholders sandboxes hold."""

from __future__ import annotations

import re
import secrets
import string

from corral.service.errors import InvalidRequest
from corral.service.secret_presets import SecretOptions
from corral.storage import SecretRecord

__all__ = [
    "MAX_VALUE",
    "PLACEHOLDER_PREFIX",
    "check_name",
    "check_value",
    "new_placeholder",
    "opt_str",
    "options_of",
]

PLACEHOLDER_PREFIX = "corral-ph-"
MAX_VALUE = 8192
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_PRINTABLE = set(string.printable) - set("\t\n\r\x0b\x0c")


def check_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise InvalidRequest(
            f"secret name {name!r} is not valid: letters, digits and _, not starting with a "
            "digit, at most 64 (it becomes an env var name)"
        )
    return name


def check_value(name: str, value: str, preset: str) -> bytes:
    """A value as the broker will send it: printable ASCII without line breaks (it goes into
    HTTP headers), at most ``MAX_VALUE`` bytes; an aws value is ``KEY_ID:SECRET``."""
    if not value or len(value) > MAX_VALUE or not set(value) <= _PRINTABLE:
        raise InvalidRequest(
            f"secret {name!r}: the value must be 1..{MAX_VALUE} printable ASCII characters "
            "without line breaks"
        )
    if PLACEHOLDER_PREFIX in value:
        raise InvalidRequest(f"secret {name!r}: the value is a corral placeholder")
    if preset == "aws":
        key_id, sep, secret = value.partition(":")
        if not sep or not key_id or not secret or " " in value:
            raise InvalidRequest(
                f"secret {name!r}: an aws value is ACCESS_KEY_ID:SECRET_ACCESS_KEY"
            )
    return value.encode("ascii")


def new_placeholder() -> str:
    return PLACEHOLDER_PREFIX + secrets.token_hex(16)


def opt_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def options_of(record: SecretRecord) -> SecretOptions:
    opts = record.options
    return SecretOptions(
        preset=record.preset,
        hosts=tuple(record.hosts),
        header=opt_str(opts.get("header")),
        scheme=opt_str(opts.get("scheme")),
        query=bool(opts.get("query", True)),
        body=bool(opts.get("body", False)),
    )
