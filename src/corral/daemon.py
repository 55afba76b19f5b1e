"""The daemon's wiring: the real mechanisms (gVisor, network slots, the host's egress) under
the service's ``Workspace``, and their shutdown.

This is the one module that names the real implementations; the service sees only their
Protocols (``runtime.base.Runtime``, ``network.base.Network``, ``EgressControl``). Tests build a
``Workspace`` over fakes instead. Nothing here runs at import time.
"""

from __future__ import annotations

from corral.config import Settings
from corral.network import egress_apply as host_egress
from corral.network.conflicts import check_subnet_free
from corral.network.sandbox_net import EgressControl, EgressWiring, SlotEgressControl
from corral.network.slots import SlotNetwork
from corral.runtime.gvisor import GVisorRuntime
from corral.runtime.inject import go_agent_mount, host_agent_mount
from corral.service.workspace import Workspace

__all__ = ["SPARE_SLOTS", "open_workspace"]

SPARE_SLOTS = 2  # network slots built ahead: a create does not wait ~20 ms for its slot


def open_workspace(settings: Settings) -> Workspace:
    """The workspace of ``settings`` on the real runtime (gVisor) and network (slots)."""
    check_subnet_free(settings.network_prefix, settings.network_subnet)
    runtime = GVisorRuntime(
        settings.sandboxes_dir,
        runsc=settings.runsc,
        platform=settings.runsc_platform,
        console_kib=settings.console_log_kib,
        min_cpus=settings.sandbox_min_cpus,
    )
    uplinks: tuple[str, ...] = ()
    if settings.egress_allowed:  # forwarding and masquerade only if some mode needs them
        named = tuple(n.strip() for n in settings.egress_uplinks.split(",") if n.strip())
        uplinks = named or host_egress.uplink_interfaces()
    network = SlotNetwork(
        prefix=settings.network_prefix,
        subnet=settings.network_subnet,
        spare=SPARE_SLOTS,
        egress_uplinks=uplinks,
    )

    def egress(wiring: EgressWiring) -> EgressControl:
        return SlotEgressControl(
            network, wiring, upstreams=settings.dns_upstream_list, internet=settings.egress_allowed
        )

    if settings.agent == "go":
        agent = go_agent_mount(settings.data_dir / "agent", binary=settings.agent_binary)
    else:
        agent = host_agent_mount(settings.data_dir / "agent", go_binary=settings.agent_binary)

    async def close_network() -> None:
        # After the workspace has closed the sandboxes' egress (Workspace.stop).
        # Sandboxes left running keep their slots and the host rules that fence them in;
        # with none left, nothing of the daemon's may stay in the host's network.
        if network.leased:
            await network.close_spares()
        else:
            await network.close()
            runtime.close()

    return Workspace.build(
        settings, runtime, network, agent, egress=egress, close_mechanisms=close_network
    )
