"""``noderole apply``, ``status``, ``stop`` and ``restart``: the product's main job.

The work is :class:`~noderole.operations.Operations`'; these commands parse, call and print.
"""

from __future__ import annotations

import json

import click

from noderole.cli._app import App
from noderole.cli._options import backend_option, lock_timeout_option, role_argument
from noderole.cli._output import echo_status
from noderole.errors import ExitCode

__all__ = ["apply_command", "restart_command", "status_command", "stop_command"]


@click.command("apply")
@role_argument
@click.option("--json", "as_json", is_flag=True, help="Print the final report as JSON.")
@backend_option
@click.option("--dry-run", is_flag=True, help="Show what would start, restart or be minted.")
@lock_timeout_option
@click.pass_obj
def apply_command(
    app: App, role: str, as_json: bool, backend: str, dry_run: bool, lock_timeout: float
) -> None:
    """Bring every service of ROLE up, in dependency order, and keep it up.

    Runs each service's pre-start steps (waits, certificates) then starts it; independent
    services proceed concurrently. Idempotent: running services whose definition and certificates
    did not change are left alone. Exit 0 when every service runs, 1 otherwise.
    """
    from noderole.console import ConsoleProgress, QuietProgress

    plan = app.plan(role)
    chosen = app.backend(backend)
    if dry_run:
        rows = app.dry_run(plan, chosen)
        if as_json:
            click.echo(
                json.dumps({"role": role, "backend": chosen.name, "services": rows}, indent=2)
            )
        else:
            from noderole.dryrun import summary

            for row in rows:
                click.echo(f"{row['name']:<28} {row['action']:<14} {row['why']}")
            click.echo(summary(rows, chosen.name))
        if any(row["action"] in ("fail", "skip") for row in rows):
            raise SystemExit(int(ExitCode.WOULD_FAIL))
        return
    progress = QuietProgress() if as_json else ConsoleProgress()
    report = app.apply(plan, chosen, progress=progress, lock_timeout=lock_timeout)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        started = sum(1 for r in report.services if r.status in ("started", "restarted"))
        kept = sum(1 for r in report.services if r.status == "running")
        running = f", {kept} already running" if kept else ""
        click.echo(
            f"role {role}: {len(report.services)} services, {started} started{running}, "
            f"{len(report.failed)} failed ({report.seconds:.2f}s, backend {report.backend})"
        )
        for failed in report.failed:
            click.echo(f"  {failed.name}: {failed.reason}", err=True)
    if not report.ok:
        raise SystemExit(int(ExitCode.FAILED))


@click.command("status")
@click.argument("role", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--wait", "wait", is_flag=True, help="Block until the role is up or has failed.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="With --wait: give up after this many seconds (exit 11).",
)
@backend_option
@click.pass_obj
def status_command(
    app: App, role: str | None, as_json: bool, wait: bool, timeout: float, backend: str
) -> None:
    """Show each service of ROLE (default: the applied role): state, pid, uptime, restarts.

    Exit 0 when every service is up (and ready, where it has a readiness check), 1 when one
    crashed or is stopped, 11 while some are still starting.
    """
    plan = app.plan(app.recorded_role(role))
    rows, verdict = app.status(plan, app.backend(backend), wait=wait, timeout=timeout)
    echo_status(plan.role, rows, verdict, as_json=as_json)
    if verdict != ExitCode.OK:
        raise SystemExit(int(verdict))


@click.command("stop")
@click.argument("names", nargs=-1, metavar="[ROLE | SERVICE...]")
@backend_option
@lock_timeout_option
@click.pass_obj
def stop_command(app: App, names: tuple[str, ...], backend: str, lock_timeout: float) -> None:
    """Stop a role (default: the applied one) or some services, in reverse dependency order.

    Returns only when every process (and its process group) is gone.
    """
    plan, targets = app.targets(names)
    stopped = app.stop(plan, targets, app.backend(backend), lock_timeout=lock_timeout)
    for name in stopped:
        click.echo(f" * Stopped {name}")
    idle = [n for n in targets if n not in stopped and plan[n].service.command is not None]
    if idle:
        click.echo(f" * Not running: {', '.join(idle)}")


@click.command("restart")
@click.argument("services", nargs=-1, required=True)
@backend_option
@lock_timeout_option
@click.pass_obj
def restart_command(app: App, services: tuple[str, ...], backend: str, lock_timeout: float) -> None:
    """Stop SERVICES, then run their pre-start steps and start them again."""
    from noderole.console import ConsoleProgress

    plan, targets = app.targets(services)
    report = app.restart(
        plan, targets, app.backend(backend), progress=ConsoleProgress(), lock_timeout=lock_timeout
    )
    if not report.ok:
        raise SystemExit(int(ExitCode.FAILED))
