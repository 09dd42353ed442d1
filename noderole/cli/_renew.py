"""``noderole renew``: re-mint running services' certificates that need it, restart only those.

The work is :meth:`~noderole.operations.Operations.renew`'s; this command parses, calls and prints.
"""

from __future__ import annotations

import json

import click

from noderole.cli import Command
from noderole.cli._app import App
from noderole.cli._options import backend_option, lock_timeout_option
from noderole.errors import ExitCode

__all__ = ["renew_command"]


@click.command("renew", cls=Command)
@click.argument("role", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (as apply does).")
@backend_option
@lock_timeout_option
@click.pass_obj
def renew_command(
    app: App, role: str | None, as_json: bool, backend: str, lock_timeout: float
) -> None:
    """Renew the certificates of ROLE's running services (default: the applied role).

    A certificate inside its renewal window, issued by a CA that changed, or whose SANs changed
    is re-minted, and only the services that read it are restarted, each with its reason; the
    rest is left alone. Exit 0 when every renewed service is back up, 1 otherwise.
    """
    from noderole.console import ConsoleProgress, QuietProgress

    plan = app.plan(app.recorded_role(role))
    progress = QuietProgress() if as_json else ConsoleProgress(failed="ERROR: failed to renew")
    report = app.renew(plan, app.backend(backend), progress=progress, lock_timeout=lock_timeout)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        renewed = [r for r in report.services if r.status in ("started", "restarted")]
        failed = (
            len(report.services)
            - len(renewed)
            - sum(1 for r in report.services if r.status == "running")
        )
        click.echo(
            f"role {plan.role}: {len(renewed)} of {len(report.services)} services with "
            f"certificates renewed{f', {failed} failed' if failed else ''} "
            f"({report.seconds:.2f}s, backend {report.backend})"
        )
        for entry in report.services:
            reason = entry.reason.removeprefix(f"{entry.status}: ")
            click.echo(f"  {entry.name}: {entry.status}: {reason}")
    if not report.ok:
        raise SystemExit(int(ExitCode.FAILED))
