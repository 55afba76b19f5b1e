"""Real slots on the real kernel: namespaces, veths and nftables made by ``SlotNetwork``.

Each test uses its own random prefix (``ct`` + hex) and a subnet that nothing on the host routes
(``tests.host.free_subnet``), so it never touches a running daemon's slots or addresses, and a
sweep at teardown removes whatever that prefix left (namespaces, veths, the nft table), also when
the test fails. Traffic goes only to the test's own namespaces and to listeners the test opens
on its own slot addresses. Servers are started in the sandbox namespace with ``ip netns exec`` and
killed by pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from corral.network import (
    INNER_ADDRESS,
    INNER_GATEWAY,
    NetworkFailure,
    Slot,
    SlotNetwork,
    Traffic,
)
from corral.network.base import CONTROL_PORT
from corral.network.namespaces import list_netns
from corral.network.slot_plan import SlotPlan
from tests.host import free_subnet

# The suite runs as root on a machine ./scripts/setup prepared: a missing piece is a failure.
pytestmark = [pytest.mark.integration]

PORT = 7000
ECHO_SERVER = """
import socket, sys
tag = sys.argv[1]
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((sys.argv[2], int(sys.argv[3])))
server.listen(8)
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    with conn:
        data = conn.recv(1024)
        conn.sendall(tag.encode() + b":" + data)
"""
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
except OSError as exc:
    print("blocked", type(exc).__name__)
else:
    print("connected")
"""


def run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def leftovers(prefix: str) -> list[str]:
    """Everything on the host that carries the prefix: namespaces, host veths, the nft table."""
    tag = SlotPlan(prefix, "10.200.0.0/16").tag
    found = [line.split()[0] for line in run("ip", "netns", "list").splitlines()]
    found = [name for name in found if name.startswith(f"{prefix}-")]
    found += [
        line.split(":")[1].strip().split("@")[0]
        for line in run("ip", "-o", "link", "show").splitlines()
        if line.split(":")[1].strip().startswith(f"{tag}-")
    ]
    found += [
        line for line in run("nft", "list", "tables").splitlines() if line.split()[-1] == prefix
    ]
    return found


def sweep(prefix: str) -> None:
    """Remove whatever the prefix left, with the plain tools (not the code under test)."""
    for item in leftovers(prefix):
        if item.startswith("table "):
            subprocess.run(["nft", "delete", *item.split()], check=False)
        elif item.startswith(f"{prefix}-"):
            subprocess.run(["ip", "netns", "delete", item], check=False)
        else:
            subprocess.run(["ip", "link", "delete", item], check=False)


@pytest.fixture
def prefix() -> Iterator[str]:
    name = f"ct{secrets.token_hex(3)}"
    try:
        yield name
    finally:
        sweep(name)


@pytest.fixture
async def networks(prefix: str) -> AsyncIterator[Callable[..., SlotNetwork]]:
    """A factory of ``SlotNetwork``s on the test's prefix; all are released and closed after."""
    made: list[SlotNetwork] = []
    # One for the test (a restarted instance must see the same slots); pyroute2's sync IPRoute
    # runs its own event loop, so it is asked from a thread.
    subnet = await asyncio.to_thread(free_subnet)

    def make(spare: int = 0) -> SlotNetwork:
        made.append(SlotNetwork(prefix=prefix, subnet=subnet, spare=spare))
        return made[-1]

    yield make
    for network in reversed(made):
        for slot in network.leased:
            # Another instance (the adoption test) may have torn it down already.
            with contextlib.suppress(NetworkFailure):
                await network.release(slot)
        await network.close()


Servers = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def servers() -> Iterator[Servers]:
    """Starts a tagged echo server in a namespace (by default a slot's sandbox namespace on the
    inner address); kills them all after, by pid."""
    started: list[subprocess.Popen[str]] = []

    def start(
        slot: Slot,
        tag: str,
        *,
        netns: str | None = None,
        address: str = INNER_ADDRESS,
        port: int = PORT,
    ) -> subprocess.Popen[str]:
        command = [sys.executable, "-c", ECHO_SERVER, tag, address, str(port)]
        process = subprocess.Popen(
            ["ip", "netns", "exec", netns or slot.netns_name, *command],
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        return process

    yield start
    for process in started:
        process.kill()
        process.wait(timeout=5)


async def ask(
    address: str, message: bytes = b"hello", timeout: float = 2.0, port: int = PORT
) -> bytes:
    async def exchange() -> bytes:
        reader, writer = await asyncio.open_connection(address, port)
        writer.write(message)
        await writer.drain()
        answer = await reader.read(1024)
        writer.close()
        await writer.wait_closed()
        return answer

    return await asyncio.wait_for(exchange(), timeout)


async def unreachable(address: str) -> bool:
    try:
        await ask(address, timeout=0.5)
    except (OSError, TimeoutError):
        return True
    return False


def connect_from(netns: str, address: str, port: int) -> str:
    return run(
        "ip",
        "netns",
        "exec",
        netns,
        sys.executable,
        "-c",
        CONNECT,
        address,
        str(port),
        "1.0",
    ).strip()


async def test_two_slots_reach_two_sandboxes_with_the_same_inner_address(
    networks: Callable[[], SlotNetwork], servers: Servers
) -> None:
    network = networks()
    first, second = await asyncio.gather(network.lease(), network.lease())
    assert first.host_address != second.host_address
    servers(first, "one")
    servers(second, "two")

    assert await ask(first.host_address) == b"one:hello"
    assert await ask(second.host_address) == b"two:hello"


async def test_a_sandbox_can_open_no_connection(
    networks: Callable[[], SlotNetwork], servers: Servers
) -> None:
    network = networks()
    first, second = await asyncio.gather(network.lease(), network.lease())
    servers(second, "two")
    layout = network.plan.layout(first.index)
    # A listener in the slot namespace, reachable there: only the slot's rules keep it from the
    # sandbox behind them.
    servers(first, "slot", netns=layout.slot_ns, address=INNER_GATEWAY)
    assert connect_from(layout.slot_ns, INNER_GATEWAY, PORT) == "connected"
    listener = await asyncio.start_server(lambda r, w: w.close(), layout.host_side_address, 0)
    try:
        port = listener.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection(layout.host_side_address, port)
        writer.close()  # the host reaches its own listener ...

        # ... the sandbox reaches neither it, nor its slot, nor another sandbox.
        for address, target_port in [
            (layout.host_side_address, port),
            (INNER_GATEWAY, PORT),
            (second.host_address, PORT),
        ]:
            verdict = await asyncio.to_thread(connect_from, first.netns_name, address, target_port)
            assert verdict.startswith("blocked"), f"{address}:{target_port}: {verdict}"
    finally:
        listener.close()
        await listener.wait_closed()
    assert await ask(second.host_address) == b"two:hello"


async def test_prepare_gives_eth0_back_its_address_and_route(
    networks: Callable[[], SlotNetwork], servers: Servers
) -> None:
    network = networks()
    slot = await network.lease()
    await network.prepare(slot)  # a slot built for its lease has them already
    servers(slot, "one")
    assert await ask(slot.host_address) == b"one:hello"

    run("ip", "-n", slot.netns_name, "address", "flush", "dev", "eth0")  # what gVisor does
    assert await unreachable(slot.host_address)

    await network.prepare(slot)
    assert await ask(slot.host_address) == b"one:hello"
    routes = run("ip", "-n", slot.netns_name, "route", "show", "default")
    assert "via 169.254.0.22 dev eth0" in routes


async def test_release_and_close_leave_nothing_behind(
    prefix: str, networks: Callable[[], SlotNetwork]
) -> None:
    network = networks()
    first, second = await asyncio.gather(network.lease(), network.lease())
    assert len(leftovers(prefix)) == 2 * 2 + 2 + 1  # namespaces, host veths, the table

    await network.release(first)
    remaining = leftovers(prefix)
    assert not [item for item in remaining if item.endswith(f"-{first.index}")]
    assert f"{prefix}-sbx-{second.index}" in remaining

    await network.release(second)
    await network.close()
    assert leftovers(prefix) == []
    with pytest.raises(NetworkFailure, match="closed"):
        await network.lease()


async def test_a_new_instance_adopts_a_running_slot_untouched(
    networks: Callable[[], SlotNetwork], servers: Servers
) -> None:
    before_restart = networks()
    slot = await before_restart.lease()
    server = servers(slot, "kept")
    connection = await asyncio.open_connection(slot.host_address, PORT)

    after_restart = networks()
    assert (await after_restart.lease()).index != slot.index  # its namespaces exist: not free
    adopted = await after_restart.lease(slot.index)

    assert adopted == slot
    assert server.poll() is None
    reader, writer = connection  # opened before the adoption, still works
    writer.write(b"still")
    assert await asyncio.wait_for(reader.read(1024), 2) == b"kept:still"
    writer.close()
    assert await ask(adopted.host_address) == b"kept:hello"
    with pytest.raises(NetworkFailure, match="already leased"):
        await after_restart.lease(slot.index)


async def test_a_slot_counts_its_sandboxes_traffic_but_not_the_control_channel(
    networks: Callable[[], SlotNetwork], servers: Servers
) -> None:
    network = networks()
    slot = await network.lease()
    assert await network.traffic(slot) == Traffic()  # a new slot starts at zero
    servers(slot, "svc")
    servers(slot, "agent", port=CONTROL_PORT)

    message = b"x" * 1000
    for _ in range(3):
        assert await ask(slot.host_address, message) == b"svc:" + message
    counted = await network.traffic(slot)
    assert counted is not None
    assert counted.rx_bytes >= 3 * len(message) and counted.rx_packets >= 3
    assert counted.tx_bytes >= 3 * len(b"svc:" + message) and counted.tx_packets >= 3

    for _ in range(20):  # the daemon talking to the agent is not the sandbox's traffic
        assert await ask(slot.host_address, message, port=CONTROL_PORT) == b"agent:" + message
    assert await network.traffic(slot) == counted

    adopted_by = networks()  # a restarted daemon adopts the slot with its counts
    adopted = await adopted_by.lease(slot.index)
    assert await adopted_by.traffic(adopted) == counted


async def test_reap_stale_removes_only_unkept_leftovers(
    prefix: str, networks: Callable[[], SlotNetwork]
) -> None:
    crashed = networks()
    slots = [await crashed.lease() for _ in range(3)]

    restarted = networks()
    reaped = await restarted.reap_stale(keep={slots[1].index})

    assert reaped == sorted([slots[0].index, slots[2].index])
    remaining = leftovers(prefix)
    assert f"{prefix}-sbx-{slots[1].index}" in remaining
    assert f"{prefix}-slot-{slots[0].index}" not in remaining
    assert f"{prefix}-sbx-{slots[2].index}" not in remaining


async def test_timing_of_set_up_and_tear_down(networks: Callable[[], SlotNetwork]) -> None:
    network = networks()
    await network.release(await network.lease())  # warm up (host table, imports)
    set_up, tear_down = [], []
    for _ in range(5):
        started = time.perf_counter()
        slot = await network.lease()
        set_up.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        await network.release(slot)
        tear_down.append((time.perf_counter() - started) * 1000)
    print(
        f"\nslot set-up median {statistics.median(set_up):.1f} ms "
        f"(min {min(set_up):.1f}), tear-down median {statistics.median(tear_down):.1f} ms "
        f"(min {min(tear_down):.1f})"
    )


async def test_spare_slots_are_leased_at_once_and_torn_down_at_shutdown(
    networks: Callable[..., SlotNetwork], prefix: str
) -> None:
    network = networks(spare=1)
    first = await network.lease()
    for _ in range(200):  # the spare is built in the background
        if network.spares:
            break
        await asyncio.sleep(0.01)
    [spare] = network.spares
    assert spare.index != first.index and network.leased == [first]
    second = await network.lease()
    assert second == spare and network.leased == [first, second]
    await network.release(first)
    await network.release(second)
    await network.close_spares()
    assert network.spares == []
    assert not [name for name in list_netns() if name.startswith(f"{prefix}-")]


async def test_slots_built_ahead_for_a_burst_are_not_replaced_once_leased(
    networks: Callable[..., SlotNetwork], prefix: str
) -> None:
    network = networks(spare=1)
    network.build_ahead(3)
    for _ in range(500):  # built in the background
        if len(network.spares) == 4:
            break
        await asyncio.sleep(0.01)
    ahead = network.spares
    assert len(ahead) == 4
    burst = [await network.lease() for _ in range(3)]
    assert burst == ahead[:3]
    for _ in range(500):  # the burst is over: back to one spare, the one left
        await asyncio.sleep(0.01)
        if network.spares == ahead[3:]:
            break
    assert network.spares == ahead[3:]
    for slot in burst:
        await network.release(slot)
    await network.close_spares()
    assert not [name for name in list_netns() if name.startswith(f"{prefix}-")]
