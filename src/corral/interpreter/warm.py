"""``python3 -m corral_interpreter.warm``: the code-interpreter template's warmup command.

Waits (at most ``WAIT`` seconds) until the server on this sandbox answers, then runs an
execution in the default Python context that loads the common libraries (numpy, pandas,
matplotlib with its inline backend) and leaves no name behind. A warm template checkpoints right
after this, so the first ``run_code`` of every sandbox made from it finds a ready kernel with
those modules loaded. Exits non-zero with the reason if the server never answers or the
execution fails (the build then fails and shows it). Standard library only.
"""

from __future__ import annotations

import http.client
import json
import sys
import time

from . import PORT

WAIT = 180.0
PRELOAD = """\
import importlib as _corral_importlib
for _corral_name in ("numpy", "pandas", "matplotlib.pyplot"):
    try:
        _corral_importlib.import_module(_corral_name)
    except ImportError:
        pass
del _corral_importlib, _corral_name
"""


def _execute(code: str) -> list[dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=WAIT)
    try:
        conn.request(
            "POST", "/execute", json.dumps({"code": code}), {"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"the server answered {response.status}: {body[:500]!r}")
        return [json.loads(line) for line in body.splitlines() if line.strip()]
    finally:
        conn.close()


def main() -> int:
    deadline = time.monotonic() + WAIT
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            print(f"the code interpreter did not answer on port {PORT} in {WAIT:g} s")
            return 1
        time.sleep(0.1)
    events = _execute(PRELOAD)
    errors = [e for e in events if e.get("type") == "error"]
    if errors:
        print(f"warming the default context failed: {errors[0]}")
        return 1
    print("the code interpreter is ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
