"""Operations on one sandbox racing each other get defined answers, never corruption."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from corral import Client
from tests.e2e.conftest import Daemon
from tests.e2e.workloads import assert_counting, read_count, start_counter


def test_second_park_while_parking_and_kill_while_forking(daemon: Daemon) -> None:
    with Client(daemon.url, daemon.key) as client, daemon.client() as http:
        sbx = client.create_sandbox(memory_mib=256)
        children: list[str] = []
        try:
            start_counter(sbx)
            before = read_count(sbx)
            barrier = threading.Barrier(2)

            def park() -> httpx.Response:
                barrier.wait()
                return http.post(f"/v1/sandboxes/{sbx.id}/park")

            with ThreadPoolExecutor(2) as pool:
                answers = list(pool.map(lambda _: park(), range(2)))
            statuses = sorted(a.status_code for a in answers)
            assert statuses == [200, 409], [a.text for a in answers]
            refused = next(a for a in answers if a.status_code == 409).json()
            assert refused["code"] == "conflict"
            assert "park" in refused["message"]
            assert sbx.info().state == "parked"
            assert sbx.wake().state == "running"
            assert_counting(sbx, before)

            # Kill the source while its fork is under way: the source ends killed, and the
            # fork either made running children or none at all (no half-made sandbox).
            with ThreadPoolExecutor(1) as pool:
                forking = pool.submit(http.post, f"/v1/sandboxes/{sbx.id}/fork", json={"count": 2})
                time.sleep(0.15)
                assert http.delete(f"/v1/sandboxes/{sbx.id}").status_code == 204
                answer = forking.result()
            assert sbx.info().state == "killed"
            if answer.status_code == 201:
                children = [c["id"] for c in answer.json()["sandboxes"]]
                for child_id in children:
                    child = client.sandbox(child_id)
                    assert child.info().state == "running"
                    assert_counting(child, before)
            else:
                assert answer.status_code in (409, 500), answer.text
            listed = http.get("/v1/sandboxes").json()["sandboxes"]
            forked = [s for s in listed if s["parent_id"] == sbx.id]
            assert sorted(s["id"] for s in forked) == sorted(children)
            assert all(s["state"] == "running" for s in forked)
        finally:
            sbx.kill()
            for child_id in children:
                client.sandbox(child_id).kill()
