"""Sandboxes: their records and transitions (``core``), validation and capacity admission
(``admission``), the live side: slots, agent links, boot (``live``), egress policies
(``policy``) and idle clocks (``activity``).

The model these enforce (states, the transition guard, requests) is ``service/model.py``;
``CreateRequest`` is re-exported here for the callers that make sandboxes.
"""

from corral.service.model import CreateRequest
from corral.service.sandboxes.core import SandboxService

__all__ = ["CreateRequest", "SandboxService"]
