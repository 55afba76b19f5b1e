"""The lifecycle of live sandboxes: park, wake, fork, reconciliation at start, and the monitor
(TTL, idle auto-park, death checks)."""

from corral.service.lifecycle.service import LifecycleService, refuse_secrets

__all__ = ["LifecycleService", "refuse_secrets"]
