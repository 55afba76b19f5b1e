"""The daemon's HTTP/1.1 link to its agents (``AgentClient``): ``corral.http1``'s client with the
agent's settings.

An idle connection is kept for ``IDLE_EXPIRY`` seconds (the agent keeps its side open longer),
at most 16 per agent. The agent is inside a sandbox, so its answers are hostile input: heads are
bounded by ``MAX_HEAD`` and ``AgentClient`` caps answers and event lines. Every failure to
connect, send, or read a well-formed answer raises ``AgentTransportError`` (``ConnectFailed``
for a connection that could not be made is one of them).
"""

from __future__ import annotations

from corral.http1 import MAX_HEAD, Answer, Connections
from corral.http1 import HTTP1Error as AgentTransportError

__all__ = ["IDLE_EXPIRY", "MAX_HEAD", "AgentConnections", "AgentTransportError", "Answer"]

IDLE_EXPIRY = 30.0


class AgentConnections(Connections):
    """Kept-alive connections to one agent at ``host``:``port`` (``corral.http1.Connections``)."""

    def __init__(self, host: str, port: int, *, max_idle: int = 16) -> None:
        super().__init__(host, port, max_idle=max_idle, idle_expiry=IDLE_EXPIRY)
