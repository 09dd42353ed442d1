"""``noderole apply``, ``status``, ``stop`` and ``restart``: the product's main job.

The work is :class:`~noderole.operations.Operations`'; these commands parse, call and print.
"""

from __future__ import annotations

import json

import click

from noderole.cli._app import App
from noderole.cli._options import backend_option, lock_timeout_option, optional_role_argument
from noderole.cli._output import echo_status
from noderole.cli._params import Seconds
from noderole.errors import ExitCode

__all__ = ["apply_command", "restart_command", "status_command", "stop_command"]


@click.command("apply")
@optional_role_argument
@click.option("--json", "as_json", is_flag=True, help="Print the final report as JSON.")
@backend_option
@click.option("--dry-run", is_flag=True, help="Show what would start, restart or be minted.")
@lock_timeout_option
@click.pass_obj
def apply_command(
    app: App, role: str | None, as_json: bool, backend: str, dry_run: bool, lock_timeout: float
) -> None:
    """Bring every service of ROLE up, in dependency order, and keep it up.

    Runs each service's pre-start steps (waits, certificates) then starts it; independent
    services proceed concurrently. Idempotent: running services whose definition and certificates
    did not change are left alone. Exit 0 when every service runs, 1 otherwise (a plugin that
    cannot define its services fails those, and what needs them; the rest still starts).

    The role: ROLE when given; else the role recorded by the last apply or render
    (/var/lib/noderole/role); else, at the first boot, the one the plugins resolve from the
    node's first-boot inputs (k3s: SPINIFEX_K3S_ROLE in first-boot.env). The record comes before
    the inputs, as in the shell's node-role selector, and is written before anything starts, so
    a failed service never changes a node's role. A role that cannot be decided changes nothing.
    """
    from noderole.console import ConsoleProgress, QuietProgress

    role = app.resolve_role(role)
    # A dry run is strict (a broken plugin is its error); apply starts what does not need it.
    plan, failures = (app.plan(role), []) if dry_run else app.plan_for_apply(role)
    chosen = app.backend(backend)
    if dry_run:
        rows = app.dry_run(plan, chosen)
        if as_json:
            click.echo(
                json.dumps({"role": role, "backend": chosen.name, "services": rows}, indent=2)
            )
        else:
            for row in rows:
                click.echo(f"{row['name']:<28} {row['action']:<14} {row['why']}")
        return
    progress = QuietProgress() if as_json else ConsoleProgress()
    report = app.apply(
        plan, chosen, progress=progress, lock_timeout=lock_timeout, failures=failures
    )
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        started = sum(1 for r in report.services if r.status in ("started", "restarted"))
        click.echo(
            f"role {role}: {len(report.services)} services, {started} started, "
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
    "--format",
    "output_format",
    type=click.Choice(["table", "json", "prometheus"]),
    default="table",
    show_default=True,
    help="Output: the table, JSON (as --json) or the Prometheus text exposition.",
)
@click.option(
    "--timeout",
    type=Seconds(zero=True),
    default=300.0,
    show_default=True,
    help="With --wait: give up after this many seconds (exit 11).",
)
@backend_option
@click.pass_obj
def status_command(
    app: App,
    role: str | None,
    as_json: bool,
    wait: bool,
    output_format: str,
    timeout: float,
    backend: str,
) -> None:
    """Show each service of ROLE (default: the applied role): state, pid, uptime, restarts.

    Exit 0 when every service is up (and ready, where it has a readiness check), 1 when one
    crashed or is stopped, 11 while some are still starting.
    """
    # From the plan the last apply recorded: status imports no plugin (a broken one cannot
    # hide what runs). Another role is planned from the plugins.
    plan = app.recorded_plan(role)
    chosen = app.recorded_backend(backend)
    if output_format == "prometheus":
        click.echo(app.metrics(plan, chosen), nl=False)
        return
    rows, verdict = app.status(plan, chosen, wait=wait, timeout=timeout)
    echo_status(plan.role, rows, verdict, as_json=as_json or output_format == "json")
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
    plan, targets = app.targets(names, from_record=True)  # no plugin is imported
    stopped = app.stop(plan, targets, app.recorded_backend(backend), lock_timeout=lock_timeout)
    for name in stopped:
        click.echo(f" * Stopped {name}")


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
