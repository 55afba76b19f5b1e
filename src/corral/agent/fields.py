"""The fields of a process request as the agent reads them: the environment (``clean_env``),
string maps, signals, terminal sizes, the user to run as, and the JSON size bounds of what the
process table keeps. Each refusal is an ``ApiError`` with the message the client sees.
"""

from __future__ import annotations

import os

from .errors import ApiError, bad_request
from .jsonio import json_dumps

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENV_PREFIX = "CORRAL_AGENT_"
MAX_PTY_SIDE = 4096  # rows or columns of a pseudo-terminal


def parse_winsize(value: object) -> tuple[int, int]:
    """``{"rows": R, "cols": C}`` (each 1..4096) as (rows, cols)."""
    if not isinstance(value, dict):
        raise bad_request('\'pty\' must be an object {"rows": R, "cols": C}')
    sides = []
    for name, default in (("rows", 24), ("cols", 80)):
        side = value.get(name, default)
        if isinstance(side, bool) or not isinstance(side, int) or not 1 <= side <= MAX_PTY_SIDE:
            raise bad_request(f"'pty.{name}' must be an integer from 1 to {MAX_PTY_SIDE}")
        sides.append(side)
    return sides[0], sides[1]


def default_shell() -> list[str]:
    """The shell a terminal starts when no command is given: bash if present, else sh."""
    return ["/bin/bash", "-l"] if os.path.exists("/bin/bash") else ["/bin/sh", "-l"]


def parse_signal(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        name = value.strip().upper()
        if name.isdigit():
            return int(name)
        if not name.startswith("SIG"):
            name = "SIG" + name
        import signal  # its enum of names is only needed here

        sig = signal.Signals.__members__.get(name)
        if sig is not None:
            return int(sig)
    raise bad_request(f"unknown signal {value!r}")


def clean_env(env: dict[str, str]) -> dict[str, str]:
    result = {k: v for k, v in env.items() if not k.startswith(ENV_PREFIX)}
    result.setdefault("PATH", DEFAULT_PATH)
    result.setdefault("HOME", "/root")
    return result


def str_dict(value: object, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise bad_request(f"'{what}' must be an object of strings")
    return value


def json_size(value: object, what: str, limit: int) -> int:
    try:
        size = len(json_dumps(value))
    except (TypeError, ValueError):
        raise bad_request(f"{what} must be JSON") from None
    if size > limit:
        raise ApiError(
            413, "too_large", f"{what} is {size} bytes as JSON; at most {limit} bytes are kept"
        )
    return size


def _pwd() -> Any:
    import pwd

    return pwd


def run_as(user: object, program: str, env: dict[str, str]) -> dict[str, Any]:
    """The spawn arguments that run ``program`` as ``user`` (a name or a uid), with ``env``'s
    ``HOME``, ``USER`` and ``LOGNAME`` set to that user's."""
    try:
        if (isinstance(user, int) and not isinstance(user, bool)) or (
            isinstance(user, str) and user.isdigit()
        ):
            uid = int(user)
            try:
                entry = _pwd().getpwuid(uid)
            except KeyError:
                return {"user": uid, "group": uid, "extra_groups": []}
        elif isinstance(user, str):
            entry = _pwd().getpwnam(user)
        else:
            raise bad_request("'user' must be a user name or uid")
    except KeyError:
        raise ApiError(
            400, "exec_failed", f"cannot execute {program!r}: unknown user {user!r}"
        ) from None
    env["HOME"] = entry.pw_dir
    env["USER"] = env["LOGNAME"] = entry.pw_name
    groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": groups}
