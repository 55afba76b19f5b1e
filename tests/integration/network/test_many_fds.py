"""The network mechanism in a process holding more than 1,100 open descriptors, as the daemon does
with a few hundred sandboxes.

libnftables waits on its netlink socket with ``select()``, and glibc aborts a process that hands
``FD_SET`` a descriptor above 1023 ("bit out of range 0 - FD_SETSIZE on fd_set"): a daemon with
251 sandboxes died of it. Each test runs a script in a subprocess (so this process's descriptor
table stays as it is) that first opens 1,100 descriptors, then drives the real code: slots
(namespaces and veths through pyroute2, both nft rulesets), an egress policy (an nft commit and
pyroute2's conntrack), the traffic counters, release. The script prints what it saw; a crash
shows as its exit status and stderr.

Names and subnets come from the test (``ct`` + hex prefix, ``tests.host.free_subnet``), and
``test_slots.sweep`` removes whatever the prefix left, also on failure.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from tests.host import free_subnet
from tests.integration.network.test_slots import leftovers, sweep

pytestmark = [pytest.mark.integration]

HELD = 1100

PRELUDE = f"""
import json, os, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < {HELD} + 1000:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, {HELD} + 4096), hard))
held = [os.open("/dev/null", os.O_RDONLY) for _ in range({HELD})]

def lowest_free_fd():
    fd = os.dup(0)
    os.close(fd)
    return fd
"""

SLOTS = """
import asyncio, dataclasses
from corral.network import SlotNetwork
from corral.network.egress import EgressContext, SlotEgress
from corral.network.egress_apply import apply_slot_egress, remove_slot_egress
from corral.network.policy import EgressPolicy
from corral.network.slot_plan import DOWNLINK, UPLINK

prefix, subnet = sys.argv[1], sys.argv[2]

async def main():
    seen = {"lowest_free_fd_before": lowest_free_fd()}
    network = SlotNetwork(prefix=prefix, subnet=subnet)
    slots = [await network.lease() for _ in range(2)]
    for slot in slots:
        await network.prepare(slot)
    seen["traffic"] = [
        dataclasses.astuple(await network.traffic(slot)) for slot in slots
    ]
    layout = network.plan.layout(slots[0].index)
    egress = SlotEgress(
        table=prefix,
        uplink=UPLINK,
        downlink=DOWNLINK,
        slot_address=layout.slot_address,
        policy=EgressPolicy.build("airgapped", allow=["198.51.100.0/24:443"]),
        context=EgressContext(subnet),
    )
    seen["forgotten"] = await asyncio.to_thread(
        apply_slot_egress, layout.slot_ns, egress, layout.host_side_address
    )
    seen["egress_removed"] = await asyncio.to_thread(remove_slot_egress, layout.slot_ns, prefix)
    for slot in slots:
        await network.release(slot)
    await network.close()
    seen["lowest_free_fd_after"] = lowest_free_fd()
    print(json.dumps(seen))

asyncio.run(main())
"""


def run_script(body: str, *args: str) -> dict[str, object]:
    script = textwrap.dedent(PRELUDE) + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-4000:]}"
    seen: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


@pytest.fixture
def prefix() -> Iterator[str]:
    name = f"ct{secrets.token_hex(3)}"
    try:
        yield name
    finally:
        sweep(name)


def test_slots_and_egress_work_with_more_than_1100_descriptors_open(prefix: str) -> None:
    seen = run_script(SLOTS, prefix, free_subnet())

    assert seen["lowest_free_fd_before"] > HELD  # type: ignore[operator]
    assert seen["traffic"] == [[0, 0, 0, 0], [0, 0, 0, 0]]  # fresh counters, read back
    assert seen["forgotten"] == 0
    assert seen["egress_removed"] is True
    assert leftovers(prefix) == []


def test_a_refused_ruleset_is_an_error_not_a_crash(prefix: str) -> None:
    seen = run_script(
        """
        from corral.network import firewall
        try:
            table = sys.argv[1]
            firewall.commit(
                f"add table inet {table}\\n"
                f"add chain inet {table} c {{ type filter hook nowhere priority 0; }}\\n",
                "a bad ruleset",
            )
        except firewall.FirewallError as exc:
            print(json.dumps({"error": str(exc), "table": firewall.has_table(sys.argv[1])}))
        """,
        prefix,
    )

    assert "committing nftables ruleset for a bad ruleset" in str(seen["error"])
    assert seen["table"] is False  # all or nothing
