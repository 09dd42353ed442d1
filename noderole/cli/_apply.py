"""``noderole apply``, ``status``, ``stop`` and ``restart``: the product's main job."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import click

from noderole.cli._app import App
from noderole.cli._inspect import build_role_plan, role_argument
from noderole.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from noderole.engine import ApplyReport, Backend
    from noderole.plan import Plan

__all__ = ["apply_command", "restart_command", "status_command", "stop_command"]

BACKENDS = ("auto", "native", "openrc", "systemd")

backend_option = click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default="auto",
    show_default=True,
    help="Who supervises the services (auto: detect the init system; native under --root).",
)
lock_timeout_option = click.option(
    "--lock-timeout",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="Seconds to wait for another apply, stop or restart to finish before refusing.",
)


def choose_backend(app: App, requested: str) -> Backend:
    """The backend for ``requested`` (``auto``: the config's choice, then detection)."""
    if requested == "auto":
        requested = str(app.config.table("noderole")["backend"])
    if requested == "auto":
        requested = detect_init(app)
    if requested == "native":
        from noderole.backends.native import NativeBackend

        return NativeBackend(app.root)
    from noderole.backends.init import InitBackend

    return InitBackend(app, requested)


def detect_init(app: App) -> str:
    """systemd if /run/systemd/system exists, OpenRC if /run/openrc does, else native.

    Always native under --root: a rehearsal must never touch the machine's real init.
    """
    if not app.root.is_real:
        return "native"
    import os

    if os.path.isdir("/run/systemd/system"):
        return "systemd"
    if os.path.isdir("/run/openrc"):
        return "openrc"
    return "native"


def _recorded_role(app: App, role: str | None) -> str:
    from noderole.state import ROLE_FILE, read_role

    if role:
        return role
    recorded = read_role(app.root)
    if recorded is None:
        raise UsageError(
            f"no role given and none recorded in {ROLE_FILE}: name one (noderole status ROLE) "
            "or apply a role first"
        )
    return recorded


def run_apply(
    app: App, plan: Plan, backend: Backend, *, quiet: bool, lock_timeout: float
) -> ApplyReport:
    """Apply under the node lock, then record the role and the definition digests."""
    from noderole.console import ConsoleProgress, QuietProgress
    from noderole.engine import apply_plan
    from noderole.state import node_lock, read_applied, write_applied, write_role

    progress = QuietProgress() if quiet else ConsoleProgress()
    with node_lock(app.root, timeout=lock_timeout, clock=app.clock, what=f"apply {plan.role}"):
        previous = read_applied(app.root)
        recorded: dict[str, dict[str, str]] = {}
        report = apply_plan(
            plan,
            root=app.root,
            clock=app.clock,
            backend=backend,
            progress=progress,
            readiness_timeout=float(app.config.table("noderole")["readiness_timeout"]),
            previous=previous,
            on_digests=recorded.update,
        )
        write_role(app.root, plan.role)
        write_applied(app.root, {**previous, **recorded})
    return report


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
    plan = build_role_plan(app, role)
    chosen = choose_backend(app, backend)
    if dry_run:
        from noderole.dryrun import dry_run_report

        rows = dry_run_report(app, plan, chosen)
        if as_json:
            click.echo(
                json.dumps({"role": role, "backend": chosen.name, "services": rows}, indent=2)
            )
        else:
            for row in rows:
                click.echo(f"{row['name']:<28} {row['action']:<14} {row['why']}")
        return
    report = run_apply(app, plan, chosen, quiet=as_json, lock_timeout=lock_timeout)
    publish_metrics(app, plan, chosen, report)  # metrics: last apply + textfile_dir
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


# ------------------------------------------------------------------------------------ metrics


def publish_metrics(app: App, plan: Plan, backend: Backend, report: ApplyReport | None) -> None:
    """Keep the apply's outcome; rewrite ``textfile_dir/noderole.prom`` when that is set."""
    from noderole import metrics

    if report is not None:
        outcome = metrics.ApplyOutcome(
            role=plan.role, ok=report.ok, seconds=report.seconds, timestamp=app.clock.time()
        )
        metrics.write_last_apply(app.root, outcome)
    directory = str(app.config.table("noderole")["textfile_dir"])
    if directory:
        text = metrics.role_metrics(plan, app.root, _status_rows(app, plan, backend))
        metrics.write_textfile(app.root.resolve(directory), text)


# ------------------------------------------------------------------------------------ status

_UP = {"running", "ready"}


def _status_rows(app: App, plan: Plan, backend: Backend) -> list[dict[str, Any]]:
    entries = [e for e in plan.services if e.service.command is not None]
    current: Mapping[str, Any] = backend.status([e.name for e in entries])
    now = time.time()
    rows = []
    for entry in entries:
        status = current.get(entry.name)
        state = status.state if status is not None else "stopped"
        if state == "running" and entry.service.readiness is None:
            state = "running"
        started_at = getattr(status, "started_at", None)
        rows.append(
            {
                "name": entry.name,
                "state": state,
                "pid": getattr(status, "pid", None),
                "uptime": round(now - started_at, 1) if started_at and state in _UP else None,
                "restarts": getattr(status, "restarts", 0),
                "last_exit": getattr(status, "last_exit", None),
                "log": entry.service.output_log or entry.service.error_log,
                "reason": getattr(status, "reason", ""),
                "needs_ready": entry.service.readiness is not None,
            }
        )
    return rows


def _verdict(rows: Sequence[Mapping[str, Any]]) -> ExitCode:
    """0 all up, 1 some failed, 11 still starting (like `cloud-init status`)."""
    if any(r["state"] in ("crashed", "stopped") for r in rows):
        return ExitCode.FAILED
    if all(
        r["state"] == "ready" or (r["state"] == "running" and not r["needs_ready"]) for r in rows
    ):
        return ExitCode.OK
    return ExitCode.STARTING


def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{sec:02d}s"


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
    type=click.FloatRange(min=0),
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
    plan = build_role_plan(app, _recorded_role(app, role))
    if output_format == "prometheus":  # metrics
        from noderole.metrics import role_metrics

        click.echo(
            role_metrics(plan, app.root, _status_rows(app, plan, choose_backend(app, backend))),
            nl=False,
        )
        return
    as_json = as_json or output_format == "json"
    verdict = show_status(
        app, plan, choose_backend(app, backend), as_json=as_json, wait=wait, timeout=timeout
    )
    if verdict != ExitCode.OK:
        raise SystemExit(int(verdict))


def show_status(
    app: App, plan: Plan, backend: Backend, *, as_json: bool, wait: bool, timeout: float
) -> ExitCode:
    """Print the status table (or JSON) of ``plan``'s services; return the verdict."""
    deadline = app.clock.monotonic() + timeout
    rows = _status_rows(app, plan, backend)
    verdict = _verdict(rows)
    while wait and verdict == ExitCode.STARTING and app.clock.monotonic() < deadline:
        app.clock.sleep(0.1)
        rows = _status_rows(app, plan, backend)
        verdict = _verdict(rows)
    if as_json:
        document = {"role": plan.role, "verdict": verdict.name.lower(), "services": rows}
        click.echo(json.dumps(document, indent=2))
        return verdict
    header = (
        f"{'SERVICE':<26} {'STATE':<9} {'PID':>7} {'UPTIME':>8} {'RESTARTS':>8}  LAST EXIT / LOG"
    )
    click.echo(header)
    for r in rows:
        pid = str(r["pid"]) if r["pid"] else "-"
        tail = r["last_exit"] or ""
        if r["log"]:
            tail = f"{tail}  {r['log']}" if tail else r["log"]
        click.echo(
            f"{r['name']:<26} {r['state']:<9} {pid:>7} {_uptime(r['uptime']):>8} "
            f"{r['restarts']:>8}  {tail}"
        )
    return verdict


# ------------------------------------------------------------------------------- stop, restart


def _targets(app: App, names: Sequence[str]) -> tuple[Plan, list[str]]:
    """The plan of the role named (or recorded) and the services to act on, in stop order."""
    services = app.plugins.services(app.node)  # once: both plans below come from it
    if len(names) == 1 and any(names[0] in s.roles for s in services):
        plan = build_role_plan(app, names[0], services)
        if names[0] not in plan:  # a role that is also one of its services names the service
            return plan, list(plan.stop_order())
    plan = build_role_plan(app, _recorded_role(app, None), services)
    if not names:
        return plan, list(plan.stop_order())
    unknown = [n for n in names if n not in plan]
    if unknown:
        raise UsageError(
            f"{', '.join(unknown)}: not a service of role {plan.role} "
            f"(its services: {', '.join(plan.names())})"
        )
    return plan, [n for n in plan.stop_order() if n in names]


@click.command("stop")
@click.argument("names", nargs=-1, metavar="[ROLE | SERVICE...]")
@backend_option
@lock_timeout_option
@click.pass_obj
def stop_command(app: App, names: tuple[str, ...], backend: str, lock_timeout: float) -> None:
    """Stop a role (default: the applied one) or some services, in reverse dependency order.

    Returns only when every process (and its process group) is gone.
    """
    from noderole.state import node_lock

    plan, targets = _targets(app, names)
    chosen = choose_backend(app, backend)
    processes = [n for n in targets if plan[n].service.command is not None]
    with node_lock(app.root, timeout=lock_timeout, clock=app.clock, what="stop"):
        chosen.stop(processes)
    publish_metrics(app, plan, chosen, None)  # metrics: textfile_dir
    for name in processes:
        click.echo(f" * Stopped {name}")


@click.command("restart")
@click.argument("services", nargs=-1, required=True)
@backend_option
@lock_timeout_option
@click.pass_obj
def restart_command(app: App, services: tuple[str, ...], backend: str, lock_timeout: float) -> None:
    """Stop SERVICES, then run their pre-start steps and start them again."""
    from noderole.plan import Plan
    from noderole.state import node_lock

    plan, targets = _targets(app, services)
    chosen = choose_backend(app, backend)
    with node_lock(app.root, timeout=lock_timeout, clock=app.clock, what="restart"):
        chosen.stop([n for n in targets if plan[n].service.command is not None])
    # A plan of just these services: what they come after outside it is running and stays so.
    restarting = set(targets)
    subset = [
        attrs.evolve(e, after=tuple(d for d in e.after if d in restarting))
        for e in plan.services
        if e.name in restarting
    ]
    sub_plan = Plan(role=plan.role, services=subset, waves=[[e.name for e in subset]])
    report = run_apply(app, sub_plan, chosen, quiet=False, lock_timeout=lock_timeout)
    publish_metrics(app, plan, chosen, None)  # metrics: textfile_dir
    if not report.ok:
        raise SystemExit(int(ExitCode.FAILED))
