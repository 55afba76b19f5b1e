"""The `corral` application: global options, error reporting, and the verb table.

Every failure a user can cause ends as one line on stderr, `error: <message>`, and exit
status 1 (2 for usage errors, as click does); set CORRAL_DEBUG=1 to see tracebacks instead.
"""

from __future__ import annotations

import os
from typing import Any

import typer
from typer.core import TyperGroup

from corral.cli import exec as exec_verb
from corral.cli import (
    files,
    lifecycle,
    network,
    sandboxes,
    serve,
    service,
    snapshots,
    templates,
    transfer,
    trust,
    workspace,
)
from corral.cli._state import CLIState
from corral.sdk import AuthenticationError, CorralError

__all__ = ["app", "main"]


class _ReportingGroup(TyperGroup):
    """Turns exceptions from any verb (subgroups included) into one `error:` line."""

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


app.command("serve")(serve.serve)
app.command("new")(sandboxes.new)
app.command("ls")(sandboxes.list_sandboxes)
app.command("info")(sandboxes.info)
app.command("kill")(sandboxes.kill)
app.command("exec", context_settings={"ignore_unknown_options": True})(exec_verb.exec_command)
app.add_typer(files.app, name="files")
app.command("park")(lifecycle.park)
app.command("wake")(lifecycle.wake)
app.command("fork")(lifecycle.fork)
app.command("network")(network.network)
app.add_typer(snapshots.app, name="snapshot")
app.command("export")(transfer.export)
app.command("import")(transfer.import_file)
app.add_typer(trust.app, name="trust")
app.add_typer(service.app, name="service")
app.command("capacity")(workspace.capacity)
app.add_typer(templates.templates_app, name="template")
app.command("mcp")(serve.mcp)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="corral")
