"""Fork: new sandboxes that continue from a running one's state, each on its own from then on."""

from __future__ import annotations

from corral import Client, Sandbox
from tests.e2e.conftest import Daemon
from tests.e2e.workloads import assert_counting, is_running, read_count, start_counter, wait_until


def test_fork_into_three_then_fork_of_a_fork(daemon: Daemon) -> None:
    with Client(daemon.url, daemon.key) as client:
        source = client.create_sandbox(memory_mib=256)
        made: list[Sandbox] = [source]
        try:
            counter = start_counter(source)
            source.files.write("/root/origin.txt", "from the source")
            at_fork = read_count(source)

            children = source.fork(3)
            made += children
            ids = {source.id, *(child.id for child in children)}
            assert len(ids) == 4
            for child in children:
                info = child.info()
                assert (info.state, info.parent_id, info.memory_mib) == ("running", source.id, 256)
                assert child.files.read("/root/origin.txt") == b"from the source"
                assert is_running(child, counter)  # same pid, carried over
                assert_counting(child, at_fork)
            assert_counting(source, at_fork)  # the original keeps running

            # Each is on its own: files diverge, and stopping one counter stops no other.
            for child in children:
                child.files.write("/root/who", child.id)
            assert source.exec(["cat", "/root/who"]).exit_code != 0
            children[0].process(counter.pid).kill()
            wait_until(lambda: not is_running(children[0], counter), what="counter to stop")
            stopped = read_count(children[0])
            for sbx in [source, *children[1:]]:
                assert_counting(sbx, at_fork)
            assert read_count(children[0]) == stopped
            for child in children:
                assert child.files.read("/root/who") == child.id.encode()

            # A fork of a fork continues from the child's state (its counter is gone).
            grandchild = children[0].fork(1)[0]
            made.append(grandchild)
            assert grandchild.info().parent_id == children[0].id
            assert grandchild.files.read("/root/who") == children[0].id.encode()
            assert not is_running(grandchild, counter)
            before = read_count(children[1])
            second = children[1].fork(1)[0]
            made.append(second)
            assert_counting(second, before)  # carried over, and advancing
            assert second.exec("echo hi").stdout == "hi\n"
        finally:
            for sbx in made:
                sbx.kill()
