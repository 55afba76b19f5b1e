"""The hand-packed rtnetlink client (``network/rtnl.py``) against the real kernel, in two
namespaces the test makes (and removes, also on failure); what it did is read back with ``ip``."""

from __future__ import annotations

import errno
import os
import secrets
import subprocess
from collections.abc import Iterator

import pytest

from corral.network.namespaces import netns_path, remove_netns, run_in_netns, run_in_new_netns
from corral.network.rtnl import Rtnl

pytestmark = [pytest.mark.integration]


@pytest.fixture
def namespaces() -> Iterator[tuple[str, str]]:
    here, there = (f"rt{secrets.token_hex(3)}-{side}" for side in ("a", "b"))
    try:
        run_in_new_netns(here, lambda: None)
        run_in_new_netns(there, lambda: None)
        yield here, there
    finally:
        remove_netns(here)
        remove_netns(there)


def ip(netns: str, *args: str) -> str:
    command = ["ip", "netns", "exec", netns, "ip", "-o", "-4", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def test_a_veth_pair_addresses_and_a_default_route(namespaces: tuple[str, str]) -> None:
    here, there = namespaces
    fd = os.open(netns_path(there), os.O_RDONLY)

    def build() -> tuple[int, bool, bool]:
        with Rtnl() as rt:
            rt.set_up("lo")
            rt.add_veth("near", "far", fd)
            index = rt.index("near")
            rt.add_address(index, "192.0.2.1", 30)
            with pytest.raises(OSError) as again:
                rt.add_address(index, "192.0.2.1", 30)
            assert again.value.errno == errno.EEXIST
            rt.replace_default_route("192.0.2.2")
            rt.replace_default_route("192.0.2.2", oif=index)  # replaced, not doubled
            with pytest.raises(OSError) as missing:
                rt.index("nowhere")
            assert missing.value.errno == errno.ENODEV
            return index, rt.delete_link("nowhere"), index > 1

    try:
        index, deleted_missing, not_lo = run_in_netns(here, build)
    finally:
        os.close(fd)
    assert not deleted_missing and not_lo
    assert "192.0.2.1/30" in ip(here, "addr", "show", "dev", "near")
    assert "UP" in ip(here, "link", "show", "dev", "near").split(">")[0]
    routes = ip(here, "route", "show", "default").splitlines()
    assert len(routes) == 1 and routes[0].startswith("default via 192.0.2.2 dev near ")
    assert "far" in ip(there, "link", "show")
    assert f"{index}:" in ip(here, "link", "show", "dev", "near")

    def delete() -> tuple[bool, bool]:
        with Rtnl() as rt:
            return rt.delete_link("near"), rt.delete_link("near")

    assert run_in_netns(here, delete) == (True, False)
    assert "far" not in ip(there, "link", "show")  # a veth goes with its peer
