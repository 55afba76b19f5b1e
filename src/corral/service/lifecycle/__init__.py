"""The lifecycle of live sandboxes: park, wake, fork, reconciliation at start, and the monitor
(TTL, idle auto-park, death checks). ``LifecycleService`` starts and stops them together."""

from corral.service.lifecycle.service import LifecycleService

__all__ = ["LifecycleService"]
