"""Text that several commands print: the plan, the status table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from noderole.console import inert
from noderole.supervisor import _jsontext as jsontext

if TYPE_CHECKING:
    from noderole.errors import ExitCode
    from noderole.plan import Plan

__all__ = ["echo_status", "format_plan", "format_uptime"]


def format_plan(plan: Plan) -> str:
    """The human-readable plan: one block per service in start order."""
    import shlex  # here: status and apply print no command line

    lines = [f"role {plan.role}: {len(plan.services)} services in {len(plan.waves)} waves"]
    for index, wave in enumerate(plan.waves):
        lines.append(f"wave {index}: {', '.join(wave)}")
    for entry in plan.services:
        service = entry.service
        lines.append("")
        origin = f"  [{service.origin}]" if service.origin else ""
        lines.append(f"{service.name}{origin}  (wave {entry.wave})")
        if service.description:
            lines.append(f"  {service.description}")
        for kind in ("need", "want", "use", "after", "before", "provide"):
            declared = getattr(service, kind)
            if declared:
                lines.append(f"  {kind}: {', '.join(declared)}")
        if entry.after:
            lines.append(f"  starts after: {', '.join(entry.after)}")
        for number, step in enumerate(service.pre_start, 1):
            lines.append(f"  pre-start {number}: {step.describe()}")
        if service.command is None:
            lines.append("  no process (done when its steps succeed)")
        else:
            lines.append(f"  command: {shlex.join(service.command)}")
            for key, value in service.environment.items():
                lines.append(f"  env: {key}={value}")
            sup = service.supervision
            respawn_max = sup.respawn_max or "unlimited"
            lines.append(f"  respawn: delay {sup.respawn_delay:g}s, max {respawn_max}")
            if sup.stop_scope == "process":
                lines.append("  stop: the process alone (what it started runs on)")
            limits = [
                *([f"{sup.open_files} open files"] if sup.open_files is not None else []),
                *([_tasks(sup.tasks)] if sup.tasks is not None else []),
                *(["cgroup delegated (systemd)"] if sup.delegate else []),
            ]
            if limits:
                lines.append(f"  limits: {', '.join(limits)}")
            if sup.notify:
                lines.append("  says when it is ready (sd_notify; under systemd, Type=notify)")
            if service.pidfile:
                lines.append(f"  pidfile: {service.pidfile}")
            logs = sorted({p for p in (service.output_log, service.error_log) if p})
            if logs:
                lines.append(f"  log: {', '.join(logs)}")
            if service.user:
                lines.append(f"  user: {service.user}")
        if service.readiness is not None:
            lines.append(f"  ready when: {service.readiness.describe()}")
    if plan.warnings:
        lines.append("")
        lines.extend(f"warning: {warning}" for warning in plan.warnings)
    return "\n".join(lines)


def _tasks(tasks: int | str) -> str:
    return "no task limit" if tasks == "infinity" else f"{tasks} tasks"


def format_uptime(seconds: float | None) -> str:
    """``1h02m`` or ``3m07s``; ``-`` when not up."""
    if seconds is None:
        return "-"
    minutes, sec = divmod(max(0, int(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{sec:02d}s"


def echo_status(
    role: str,
    rows: Sequence[Mapping[str, Any]],
    verdict: ExitCode,
    *,
    as_json: bool,
    detail: bool = False,
) -> None:
    """Print the status table (or JSON document) of ``role``'s services, then what explains a
    service that is not up: the last apply's outcome, the supervisor's reason, its log's end."""
    import datetime as dt

    if as_json:
        document = {"role": role, "verdict": verdict.name.lower(), "services": list(rows)}
        click.echo(jsontext.dumps(document, indent=2))
        return
    header = (
        f"{'SERVICE':<26} {'STATE':<9} {'PID':>7} {'UPTIME':>8} {'RESTARTS':>8}  LAST EXIT / LOG"
    )
    click.echo(header)
    for r in rows:
        pid = str(r["pid"]) if r["pid"] else "-"
        tail = r["last_exit"] or ""
        if r["log"]:
            tail = f"{tail}  {r['log']}" if tail else r["log"]
        # A stop under way (a `stop` interrupted, the supervisor finishing it) keeps the state
        # "running" until the process is gone: the table said running for a service about to
        # be killed.
        state = "stopping" if r["reason"] == "stopping" else r["state"]
        # The last exit may quote the service's own files (its #! line): never raw to a terminal.
        click.echo(
            f"{r['name']:<26} {state:<9} {pid:>7} {format_uptime(r['uptime']):>8} "
            f"{r['restarts']:>8}  {inert(tail)}"
        )
    for r in rows:
        notes = []
        last = r.get("last_apply")
        up = r["state"] in ("running", "ready", "starting")
        if last and (detail or last["outcome"] in ("failed", "skipped") or not up):
            when = dt.datetime.fromtimestamp(last["at"]).strftime("%Y-%m-%d %H:%M:%S")
            reason = (last["reason"] or "").removeprefix(f"{last['outcome']}: ")
            because = f": {reason}" if reason else ""
            notes.append(f"last apply ({when}): {last['outcome']}{because}")
        if r.get("next_attempt"):
            notes.append(f"no process: {r['next_attempt']}")
        elif r["reason"] and (detail or not up or r.get("unsupervised")):
            notes.append(r["reason"])
        if detail and r.get("log") is None:
            notes.append("no log file yet")
        if not notes and not r.get("log_tail"):
            continue
        click.echo("")
        click.echo(f"{r['name']}:")
        for note in notes:
            click.echo(f"  {inert(note)}")
        if r.get("log_tail"):
            click.echo(f"  last lines of {r['log']}:")
            for line in r["log_tail"]:
                click.echo(f"    {inert(line)}")
