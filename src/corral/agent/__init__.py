"""The in-sandbox agent: the init process of every sandbox, serving ``docs/agent-protocol.md``.

``agent.py`` next to this file is the agent itself. It is not imported by the daemon: the runtime
bind-mounts it read-only into each sandbox and runs it on the host's interpreter as
``python -I -S agent.py``, so it uses the standard library only and imports nothing of corral. The
daemon talks to it through ``corral.runtime.agent_client``.

This package only tells the daemon where the file is and which port it listens on; it must import
nothing else of corral.
"""

from pathlib import Path

__all__ = ["AGENT_PATH", "AGENT_PORT"]

AGENT_PATH = Path(__file__).with_name("agent.py")
AGENT_PORT = 49983
