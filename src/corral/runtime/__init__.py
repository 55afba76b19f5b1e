"""The runtime mechanism: boots, checkpoints, restores and destroys isolated sandboxes.

``Runtime`` is the protocol (``base.py``); ``GVisorRuntime`` runs sandboxes under gVisor's runsc;
``FakeRuntime`` is an in-memory stand-in for unit tests; ``build_agent_mount`` lays out a private
copy of what the agent needs of the host's interpreter, and the agent, for injection.
"""

from .base import (
    AgentMount,
    Resources,
    Runtime,
    RuntimeFailure,
    RuntimeInfo,
    RuntimeStatus,
    SandboxSpec,
)
from .fake import FakeRuntime
from .gvisor import GVisorRuntime
from .inject import InjectError, build_agent_mount

__all__ = [
    "AgentMount",
    "FakeRuntime",
    "GVisorRuntime",
    "InjectError",
    "Resources",
    "Runtime",
    "RuntimeFailure",
    "RuntimeInfo",
    "RuntimeStatus",
    "SandboxSpec",
    "build_agent_mount",
]
