"""``noderole reset``: stop a role and remove what noderole wrote (``kubeadm reset``'s idea).

The work is :meth:`~noderole.operations.Operations.reset`'s; this command parses, calls and prints.
"""

from __future__ import annotations

import json

import click

from noderole.cli import Command
from noderole.cli._app import App
from noderole.cli._options import backend_option, lock_timeout_option
from noderole.console import inert

__all__ = ["reset_command"]


@click.command("reset", cls=Command)
@click.argument("role", required=False)
@click.option(
    "--purge", is_flag=True, help="Also remove minted keys and certificates, and service logs."
)
@click.option("--dry-run", is_flag=True, help="List what would be stopped and removed.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@backend_option
@lock_timeout_option
@click.pass_obj
def reset_command(
    app: App,
    role: str | None,
    purge: bool,
    dry_run: bool,
    as_json: bool,
    backend: str,
    lock_timeout: float,
) -> None:
    """Stop ROLE's services (default: the applied role) and remove what apply, render and enable
    wrote: runscripts and units, drop-ins, periodic jobs, state, pidfiles, the recorded role.

    Only files noderole recorded writing are removed, and only while they hold what it wrote.
    Minted keys and certificates, service logs and data stay unless --purge. Running it again
    does nothing.
    """
    report = app.reset(
        role,
        app.backend(backend),
        purge=purge,
        dry_run=dry_run,
        lock_timeout=lock_timeout,
    )
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        return
    verb = ("would stop", "would remove") if dry_run else ("stopped", "removed")
    for name in report.stopped:
        click.echo(f"{verb[0]} {name}")
    if dry_run:
        for item in report.removals:
            if item.action == "remove":
                when = f" ({item.reason})" if item.reason else ""
                click.echo(f"{verb[1]} {item.path}{when}")
    else:
        for path in report.removed:
            click.echo(f"{verb[1]} {path}")
    for kept in report.kept:
        # A kept directory's reason names what a service's user put in it: shown, not obeyed.
        click.echo(inert(f"{kept.reason.split(':')[0]} {kept.path}:{kept.reason.split(':', 1)[1]}"))
    if not (report.stopped or report.to_remove or report.removed):
        click.echo("nothing to reset")
