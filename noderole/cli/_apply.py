"""``noderole apply``, ``status``, ``stop`` and ``restart``: the product's main job.

The work is :class:`~noderole.operations.Operations`'; these commands parse, call and print.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import click

from noderole.cli import Command
from noderole.cli._app import App
from noderole.cli._options import backend_option, lock_timeout_option, optional_role_argument
from noderole.cli._params import Seconds
from noderole.errors import ExitCode, NoderoleError, PlanError
from noderole.operations import status_verdict
from noderole.supervisor import _jsontext as jsontext

if TYPE_CHECKING:
    from noderole.backends import Backend
    from noderole.plan import Plan
    from noderole.recorded import RecordedView

__all__ = ["apply_command", "restart_command", "status_command", "stop_command"]


@click.command("apply", cls=Command)
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
    from noderole.console import ConsoleProgress, QuietProgress, inert

    if not dry_run:
        # The supervisor daemon's start-up (an interpreter and its imports) runs meanwhile.
        app.prepare_backend(backend)
        click.get_current_context().call_on_close(app.discard_prepared)
    role = app.resolve_role(role)
    # A dry run is strict (a broken plugin is its error); apply starts what does not need it.
    plan, failures = (app.plan(role), []) if dry_run else app.plan_for_apply(role)
    chosen = app.backend(backend)
    _warn_config(app)
    if dry_run:
        rows = app.dry_run(plan, chosen)
        if as_json:
            click.echo(
                jsontext.dumps({"role": role, "backend": chosen.name, "services": rows}, indent=2)
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
    report = app.apply(
        plan, chosen, progress=progress, lock_timeout=lock_timeout, failures=failures
    )
    _warn_config(app)  # what the apply brought up (services it stopped: no longer planned)
    if as_json:
        _say(jsontext.dumps(report.to_dict(), indent=2))
    else:
        started = sum(1 for r in report.services if r.status in ("started", "restarted"))
        kept = sum(1 for r in report.services if r.status == "running")
        running = f", {kept} already running" if kept else ""
        count = len(report.services)
        _say(
            f"role {role}: {count} service{'' if count == 1 else 's'}, {started} started{running}, "
            f"{len(report.failed)} failed ({report.seconds:.2f}s, backend {report.backend})"
        )
        for failed in report.failed:
            _say(f"  {failed.name}: {inert(failed.reason)}", err=True)
    if not report.ok:
        raise SystemExit(int(ExitCode.FAILED))


@click.command("status", cls=Command)
@click.argument("role", required=False, metavar="[ROLE | SERVICE]")
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
@click.option(
    "--lines",
    "-n",
    type=click.IntRange(min=0),
    default=None,
    help="Log lines shown for a failed service (default 5; 20 for `status SERVICE`).",
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
    lines: int | None,
    backend: str,
) -> None:
    """Show each service of ROLE (default: the applied role): state, pid, uptime, restarts, the
    last apply's outcome and, for a failed service, the end of its log. `status SERVICE` shows
    one service of the applied role, with more of its log.

    Exit 0 when every service is up (and ready, where it has a readiness check), 1 when one
    crashed or is stopped, 11 while some are still starting, 10 when the native supervisor is
    not answering (stopped or hung: nothing is supervised; each process is shown as /proc has
    it, and --wait ends at once). Works from the state the last apply recorded when
    config.toml is broken (with a warning).
    """
    app.recorded_config_fallback = True
    if output_format == "prometheus":
        full, chosen, _ = _full_status_plan(app, role, backend)
        click.echo(app.metrics(full, chosen), nl=False)
        return
    # The usual case, the applied role under the native supervisor, is read from the recorded
    # plan as it is: no record, no attrs, no planning (a fresh process at the console).
    plan: Plan | RecordedView
    light = app.recorded_status(role, backend)
    plan, chosen, only = light if light is not None else _full_status_plan(app, role, backend)
    if lines is None:
        lines = 20 if only else 5
    _warn_config(app)
    rows, verdict = app.status(plan, chosen, wait=wait, timeout=timeout, log_lines=lines)
    if only:
        rows = [r for r in rows if r["name"] == only]
        verdict = status_verdict(rows)
    _warn_config(app)  # what reading the state brought up
    from noderole.cli._output import echo_status  # status prints tables; apply never does

    echo_status(
        plan.role,
        rows,
        verdict,
        as_json=as_json or output_format == "json",
        detail=only is not None,
    )
    if verdict != ExitCode.OK:
        raise SystemExit(int(verdict))


def _full_status_plan(app: App, role: str | None, backend: str) -> tuple[Plan, Backend, str | None]:
    """The plan ``status [ROLE | SERVICE]`` shows, its backend and the service asked for: from
    the recorded plan's records, or planned from the plugins for another role."""
    only = None
    plan = None
    recorded = None
    if role:
        # SERVICE of the applied role? Asked of the recorded plan: no plugin is imported.
        with contextlib.suppress(NoderoleError):
            recorded = app.recorded_plan(note=False)
            if role != recorded.role and role in recorded:
                plan, only = app.recorded_plan(), role  # shown: say whose it is
            elif role != recorded.role:
                # SERVICE of the role recorded for the next apply (enable)?
                upcoming = app.next_role()
                if upcoming is not None and upcoming not in (role, recorded.role):
                    next_plan = app.plan(upcoming)
                    if role in next_plan:
                        plan, only = next_plan, role
    if plan is None:
        # From the plan the last apply recorded: status imports no plugin (a broken one cannot
        # hide what runs). Another role is planned from the plugins.
        try:
            plan = app.recorded_plan(role)
        except PlanError as exc:
            if not role or recorded is None:
                raise
            from noderole.records import did_you_mean

            hint = did_you_mean(role, recorded.names())  # a misspelled service of the role?
            if not hint:
                raise
            raise PlanError(
                f"{role!r} is not a service of role {recorded.role}{hint}, nor a role: {exc}"
            ) from None
    return plan, app.recorded_backend(backend), only


def _say(text: str, *, err: bool = False) -> None:
    """``click.echo`` for the commands that change the node (apply, stop, restart): a console
    that went away (a reader gone from the pipe, a closed terminal) loses the line, and the
    command's exit status stays its work's (click would end it with 1, a failed service)."""
    with contextlib.suppress(OSError):
        click.echo(text, err=err)


def _warn_config(app: App) -> None:
    """Print the operations' warnings (a broken config, a backend that does not fit) once."""
    syntax = app.config_syntax_warning() if not app.config_warning else ""
    shown = [w for w in (app.config_warning, syntax) if w]
    for warning in shown + app.warnings:
        if warning not in app.warned:
            app.warned.add(warning)
            _say(f"noderole: warning: {warning}", err=True)
    app.config_warning = ""
    app.warnings.clear()


@click.command("stop", cls=Command)
@click.argument("names", nargs=-1, metavar="[ROLE | SERVICE...]")
@backend_option
@lock_timeout_option
@click.pass_obj
def stop_command(app: App, names: tuple[str, ...], backend: str, lock_timeout: float) -> None:
    """Stop a role (default: the applied one) or some services, in reverse dependency order.

    Stopping a service stops first the running services that need it (`need`, directly or
    through others; not `want`, `use` or `after`), each named with why (` * Stopping huser (it
    needs hdep)`), as OpenRC and systemd do. Returns only when every process (and its process
    group) is gone. Works from the state the last apply recorded when config.toml is broken
    (with a warning).
    """
    app.recorded_config_fallback = True
    plan, targets = app.targets(names, from_record=True)  # no plugin is imported
    chosen = app.recorded_backend(backend)
    _warn_config(app)
    whole = not names or (len(names) == 1 and names[0] == plan.role and plan.role not in plan)
    stopped, leftovers = app.stop(
        plan, targets, chosen, lock_timeout=lock_timeout, strays=whole, told=_stopping
    )
    if leftovers:
        # Their supervisor was killed with its watchdog: the one started for this stop ended
        # them as it started (every service's, in the plan's stop order).
        order = [n for n in plan.stop_order() if n in leftovers]
        order += sorted(n for n in leftovers if n not in order)
        ended = ", ".join(f"{n} ({_pids(leftovers[n])})" for n in order)
        _say(f" * Stopped leftover processes of a killed supervisor: {ended}")
    for name in stopped:
        _say(
            f" * Stopped {name}"
            if name in plan
            else f" * Stopped {name} (not in the plan of role {plan.role})"
        )
    idle = [
        n
        for n in targets
        if n not in stopped and n not in leftovers and plan[n].service.command is not None
    ]
    if idle:
        _say(f" * Not running: {', '.join(idle)}")


def _stopping(name: str, why: str) -> None:
    """Say that ``name`` stops because it needs what is stopped (``why``: ``it needs hdep``)."""
    _say(f" * Stopping {name} ({why})")


def _pids(pids: list[int]) -> str:
    return f"pid {pids[0]}" if len(pids) == 1 else f"pids {' '.join(map(str, pids))}"


@click.command("restart", cls=Command)
@click.argument("services", nargs=-1, required=True)
@backend_option
@lock_timeout_option
@click.pass_obj
def restart_command(app: App, services: tuple[str, ...], backend: str, lock_timeout: float) -> None:
    """Stop SERVICES, then run their pre-start steps and start them again.

    The running services that need them (`need`, directly or through others) are stopped
    first, each named with why, and started again after them, as OpenRC and systemd restart
    them. With a broken config.toml, the settings the last apply recorded are used (with a
    warning).
    """
    from noderole.console import ConsoleProgress

    app.recorded_config_fallback = True
    plan, targets = app.targets(services)
    chosen = app.backend(backend)
    _warn_config(app)
    report = app.restart(
        plan,
        targets,
        chosen,
        progress=ConsoleProgress(),
        lock_timeout=lock_timeout,
        told=_stopping,
    )
    if not report.ok:
        raise SystemExit(int(ExitCode.FAILED))
