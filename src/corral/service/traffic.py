"""A sandbox's network traffic since it was created: what its record keeps plus its live slot's.

A slot counts from zero when it is built and forgets at release (``network.base``), so the
record keeps the sum of the slots a sandbox has left: park adds the slot's counts to it
(``traffic_totals``) before the slot goes. A daemon restart re-adopts a running sandbox's slot
with its counters intact, so nothing is added then. A fork and a restored snapshot are new
records: they start at zero.
"""

from __future__ import annotations

from typing import Any

from corral.network.base import Traffic
from corral.storage import SandboxRecord

__all__ = ["Traffic", "recorded_traffic", "traffic_totals"]  # Traffic: for the edges


def recorded_traffic(record: SandboxRecord) -> Traffic:
    """The traffic a record keeps from the slots its sandbox has left."""
    return Traffic(
        rx_bytes=record.net_rx_bytes,
        rx_packets=record.net_rx_packets,
        tx_bytes=record.net_tx_bytes,
        tx_packets=record.net_tx_packets,
    )


def traffic_totals(record: SandboxRecord | None, counted: Traffic | None) -> dict[str, Any]:
    """The record fields that add ``counted`` (a slot about to be released) to its totals."""
    if record is None or counted is None:
        return {}
    total = recorded_traffic(record) + counted
    return {
        "net_rx_bytes": total.rx_bytes,
        "net_rx_packets": total.rx_packets,
        "net_tx_bytes": total.tx_bytes,
        "net_tx_packets": total.tx_packets,
    }
