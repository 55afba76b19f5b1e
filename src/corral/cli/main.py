"""The `corral` application: global options, error reporting, and the verb table.

Every failure a user can cause ends as one line on stderr, `error: <message>`, and exit
status 1 (2 for usage errors, as click does); set CORRAL_DEBUG=1 to see tracebacks instead.

A verb's module is imported when that verb runs (or when the root's help lists it), so
`corral exec` pays for nothing of `corral template`: add a verb with one line in `VERBS`.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import typer
import typer.main
from typer.core import TyperGroup

from corral.cli._state import CLIState
from corral.sdk.errors import AuthenticationError, CorralError

__all__ = ["VERBS", "app", "main"]

# name -> "module:attribute", a command function or a Typer group; help lists them in this order.
VERBS: dict[str, str] = {
    "serve": "corral.cli.serve:serve",
    "new": "corral.cli.sandboxes:new",
    "ls": "corral.cli.sandboxes:list_sandboxes",
    "info": "corral.cli.sandboxes:info",
    "kill": "corral.cli.sandboxes:kill",
    "exec": "corral.cli.exec:exec_command",
    "run-code": "corral.cli.code:run_code",
    "park": "corral.cli.lifecycle:park",
    "wake": "corral.cli.lifecycle:wake",
    "fork": "corral.cli.lifecycle:fork",
    "network": "corral.cli.network:network",
    "export": "corral.cli.transfer:export",
    "import": "corral.cli.transfer:import_file",
    "capacity": "corral.cli.workspace:capacity",
    "key": "corral.cli.keys:app",
    "policy": "corral.cli.policy:app",
    "audit": "corral.cli.audit:audit",
    "events": "corral.cli.audit:events",
    "top": "corral.cli.top:top",
    "console": "corral.cli.workspace:console",
    "mcp": "corral.cli.serve:mcp",
    "files": "corral.cli.files:app",
    "snapshot": "corral.cli.snapshots:app",
    "trust": "corral.cli.trust:app",
    "service": "corral.cli.service:app",
    "port": "corral.cli.ports:app",
    "secret": "corral.cli.secrets:app",
    "template": "corral.cli.templates:templates_app",
    "e2b": "corral.cli.e2b:app",
    "shell": "corral.cli.shell:shell",
}
# Click settings of a command verb, where it needs any.
_SETTINGS: dict[str, dict[str, Any]] = {
    "exec": {"context_settings": {"ignore_unknown_options": True}},
}


def _load(name: str) -> Any:
    """Build the click command of verb `name` from its Typer definition."""
    module, _, attribute = VERBS[name].partition(":")
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):
        target.rich_markup_mode = None  # click's plain help, as the root's: rich is not loaded
        group = typer.main.get_group(target)
        group.name = name
        return group
    single = typer.Typer(add_completion=False, rich_markup_mode=None)
    single.command(name, **_SETTINGS.get(name, {}))(target)
    return typer.main.get_command(single)


class _ReportingGroup(TyperGroup):
    """The verb table, loaded verb by verb; turns exceptions from any verb (subgroups included)
    into one `error:` line."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [*VERBS, *(name for name in super().list_commands(ctx) if name not in VERBS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in VERBS:
            self.commands[cmd_name] = _load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort):
            raise
        except AuthenticationError as exc:
            _fail(f"{exc} (check CORRAL_API_KEY or --api-key)")
        except CorralError as exc:
            _fail(str(exc))
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except BrokenPipeError:
            raise typer.Exit(1) from None
        except OSError as exc:
            _fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        except Exception as exc:
            # Usage errors and exits of typer's (vendored) click pass through to be reported.
            if type(exc).__module__.startswith(("typer", "click")) or os.environ.get(
                "CORRAL_DEBUG"
            ):
                raise
            _fail(f"unexpected {type(exc).__name__}: {exc} (CORRAL_DEBUG=1 shows the traceback)")


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


app = typer.Typer(
    cls=_ReportingGroup,
    name="corral",
    help="Self-hosted sandboxes for AI agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)


@app.callback()
def _global_options(
    ctx: typer.Context,
    url: str | None = typer.Option(
        None, "--url", envvar="CORRAL_URL", help="Daemon URL (default http://127.0.0.1:7070)."
    ),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="CORRAL_API_KEY", help="API key.", show_envvar=True
    ),
) -> None:
    options = ctx.ensure_object(CLIState)
    options.url = url or options.url
    options.api_key = api_key or options.api_key
    ctx.call_on_close(options.close)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="corral")
