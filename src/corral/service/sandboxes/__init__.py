"""Sandboxes: their records, admission, the live side (slot, agent link) and its machinery.

``SandboxService`` is the package's entry point; the model it enforces (states, the guard,
requests) is ``service/model.py``.
"""

from corral.service.model import CreateRequest
from corral.service.sandboxes.core import SandboxService

__all__ = ["CreateRequest", "SandboxService"]
