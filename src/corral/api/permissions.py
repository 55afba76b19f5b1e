"""What each route of the API needs, by operation id: one table, read by ``authorize_route``.

A route that is not in the table is refused to everyone (fails closed), and the role x route
test (tests/unit/api/test_access.py) fails for it, so a new route cannot ship without a rule.
Which roles have which permission is ``service.access``; which objects a key sees (its own, as a
member) is decided by the services themselves.
"""

from __future__ import annotations

from corral.service.access import Permission

__all__ = ["PUBLIC", "ROUTES", "permission_of"]


def _p(scope: str, level: str) -> Permission:
    return Permission(scope, level)  # type: ignore[arg-type]


# Served without a key.
PUBLIC = frozenset({"health"})

ROUTES: dict[str, Permission] = {
    # sandboxes and everything inside them
    "create_sandbox": _p("sandboxes", "write"),
    "list_sandboxes": _p("sandboxes", "read"),
    "get_sandbox": _p("sandboxes", "read"),
    "kill_sandbox": _p("sandboxes", "write"),
    "park_sandbox": _p("sandboxes", "write"),
    "wake_sandbox": _p("sandboxes", "write"),
    "fork_sandbox": _p("sandboxes", "write"),
    "set_sandbox_network": _p("sandboxes", "write"),
    "exec_command": _p("sandboxes", "write"),
    "list_processes": _p("sandboxes", "read"),
    "get_process": _p("sandboxes", "read"),
    "process_events": _p("sandboxes", "read"),
    "send_stdin": _p("sandboxes", "write"),
    "close_stdin": _p("sandboxes", "write"),
    "signal_process": _p("sandboxes", "write"),
    "open_pty": _p("sandboxes", "write"),
    "resize_pty": _p("sandboxes", "write"),
    "read_file": _p("sandboxes", "read"),
    "stat_file": _p("sandboxes", "read"),
    "list_files": _p("sandboxes", "read"),
    "write_file": _p("sandboxes", "write"),
    "make_dir": _p("sandboxes", "write"),
    "move_file": _p("sandboxes", "write"),
    "remove_file": _p("sandboxes", "write"),
    "execute_code": _p("sandboxes", "write"),
    "create_code_context": _p("sandboxes", "write"),
    "list_code_contexts": _p("sandboxes", "read"),
    "restart_code_context": _p("sandboxes", "write"),
    "remove_code_context": _p("sandboxes", "write"),
    # a port's listing holds its access token: the sandbox's owner's (or an admin's)
    "list_ports": _p("sandboxes", "write"),
    "open_port": _p("sandboxes", "write"),
    "close_port": _p("sandboxes", "write"),
    # an export carries a sandbox's whole memory and disk: its owner's (or an admin's) call
    "export_sandbox": _p("snapshots", "write"),
    # templates
    "list_templates": _p("templates", "read"),
    "get_template": _p("templates", "read"),
    "template_logs": _p("templates", "read"),
    "list_recipes": _p("templates", "read"),
    "upload_build_input": _p("templates", "write"),
    "build_template": _p("templates", "write"),
    "delete_template": _p("templates", "write"),
    "share_template": _p("templates", "admin"),
    # snapshots, exports and imports
    "snapshot_sandbox": _p("snapshots", "write"),
    "list_snapshots": _p("snapshots", "read"),
    "get_snapshot": _p("snapshots", "read"),
    "remove_snapshot": _p("snapshots", "write"),
    "export_snapshot": _p("snapshots", "write"),
    "import_file": _p("snapshots", "admin"),
    # the workspace
    "get_capacity": _p("workspace", "read"),
    "get_policy": _p("workspace", "read"),
    "set_policy": _p("workspace", "admin"),
    "follow_events": _p("events", "read"),
    "get_metrics": _p("metrics", "admin"),
    "sandbox_metrics": _p("sandboxes", "read"),
    # administration
    "create_key": _p("keys", "admin"),
    "list_keys": _p("keys", "admin"),
    "revoke_key": _p("keys", "admin"),
    "get_self": _p("self", "read"),
    "query_audit": _p("audit", "admin"),
    "list_services": _p("services", "admin"),
    "put_service": _p("services", "admin"),
    "remove_service": _p("services", "admin"),
    "list_secrets": _p("secrets", "admin"),
    "secret_log": _p("secrets", "admin"),
    "get_secret": _p("secrets", "admin"),
    "put_secret": _p("secrets", "admin"),
    "rotate_secret": _p("secrets", "admin"),
    "remove_secret": _p("secrets", "admin"),
    "revoke_secret": _p("secrets", "admin"),
    # a console login link acts as the calling key, whatever it is
    "create_console_login_token": _p("self", "read"),
    "list_trusted_keys": _p("trust", "admin"),
    "get_workspace_key": _p("trust", "admin"),
    "add_trusted_key": _p("trust", "admin"),
    "remove_trusted_key": _p("trust", "admin"),
    # the interactive docs
    "swagger": _p("workspace", "read"),
    "redoc": _p("workspace", "read"),
}

_NOBODY = Permission("unlisted route", "admin")


def permission_of(operation_id: str) -> Permission:
    """The route's permission; a route without a rule gets one no role has."""
    return ROUTES.get(operation_id, _NOBODY)
