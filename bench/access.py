"""What keys, ownership and the audit log cost a call: the same calls as an admin and as a member.

    .venv/bin/python bench/access.py [--runs 200]

On a private daemon with one idle sandbox owned by a member key, in turn (so load from elsewhere
weighs on all alike): `GET /healthz` (no key, no audit: the HTTP floor), `GET /v1/capacity` as
the admin (a key check), `GET /v1/sandboxes/ID` as the admin and as the member (the member's
call also checks ownership), and an exec of `true` as each (an exec is a mutating call, so each
one is also appended to the audit log). Printed: medians and p99 in ms, ratios to the floor, and
the member's extra cost over the admin's for the same call.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import httpx
from _harness import Figures, private_daemon, report

from corral import Sandbox


def client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    print("load average at the start:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    with private_daemon() as daemon:
        admin = httpx.Client(base_url=daemon.url, headers={"Authorization": f"Bearer {daemon.key}"})
        created = admin.post(
            "/v1/keys", json={"name": "bench", "role": "member", "rate_limit": 1e6}
        )
        member_key = created.json()["key"]
        member = httpx.Client(
            base_url=daemon.url, headers={"Authorization": f"Bearer {member_key}"}
        )
        with Sandbox.create(url=daemon.url, api_key=member_key) as sbx:
            exec_body = {"cmd": ["true"]}
            calls = {
                "GET /healthz (no key)": lambda: admin.get("/healthz"),
                "GET /v1/capacity, admin": lambda: admin.get("/v1/capacity"),
                "GET /v1/sandboxes/ID, admin": lambda: admin.get(f"/v1/sandboxes/{sbx.id}"),
                "GET /v1/sandboxes/ID, member (owner)": lambda: member.get(
                    f"/v1/sandboxes/{sbx.id}"
                ),
                "exec true, admin": lambda: admin.post(
                    f"/v1/sandboxes/{sbx.id}/exec", json=exec_body
                ),
                "exec true, member (owner)": lambda: member.post(
                    f"/v1/sandboxes/{sbx.id}/exec", json=exec_body
                ),
            }
            samples: dict[str, list[float]] = {name: [] for name in calls}
            for i in range(args.runs + 3):
                for name, call in calls.items():
                    response = call()
                    if response.status_code >= 400:
                        raise RuntimeError(f"{name}: {response.status_code} {response.text}")
                    if i >= 3:  # three warm-up rounds
                        samples[name].append(response.elapsed.total_seconds() * 1000)
        entries = admin.get("/v1/audit", params={"key": "bench", "limit": 5000}).json()["entries"]
        admin.close()
        member.close()
    figures = {name: Figures(name, values) for name, values in samples.items()}
    floor = figures["GET /healthz (no key)"]
    report([(f, floor) for name, f in figures.items() if f is not floor])
    for what in ("GET /v1/sandboxes/ID", "exec true"):
        extra = figures[f"{what}, member (owner)"].p50 - figures[f"{what}, admin"].p50
        print(f"member over admin, {what}: {extra:+.2f} ms at p50")
    print(f"audit entries of the member key: {len(entries)} (its execs and its sandbox's create)")
    print("load average at the end:", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
