"""``noderole list``, ``plan`` and ``graph``: look at what the plugins contribute, start nothing."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

import click

from noderole.cli._app import App

if TYPE_CHECKING:
    from collections.abc import Sequence

    from noderole.plan import Plan
    from noderole.records import Service

__all__ = ["graph_command", "list_command", "plan_command"]


def _complete_role(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion for ROLE: the roles the installed plugins declare."""
    app = ctx.find_object(App)
    if app is None:
        return []
    try:
        roles = {role for s in app.plugins.services(app.node) for role in s.roles}
    except Exception:  # completion must never print a traceback into the shell
        return []
    return sorted(r for r in roles if r.startswith(incomplete))


role_argument = click.argument("role", shell_complete=_complete_role)


def build_role_plan(app: App, role: str, services: Sequence[Service] | None = None) -> Plan:
    """Plan ``role`` from the plugins' services (collected here unless the caller has them:
    hooks read files, so a command calls them once)."""
    from noderole.plan import build_plan

    if services is None:
        services = app.plugins.services(app.node)
    return build_plan(services, role, plugins=app.plugins.names())


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_command(app: App, as_json: bool) -> None:
    """List installed plugins with their version, distribution, services and roles."""
    services = app.plugins.services(app.node)
    rows: list[dict[str, Any]] = []
    for info in app.plugins.infos:
        own = sorted((s for s in services if s.origin == info.name), key=lambda s: s.name)
        rows.append(
            {
                "plugin": info.name,
                "distribution": info.distribution,
                "version": info.version,
                "entry_point": info.entry_point,
                "services": [{"name": s.name, "roles": list(s.roles)} for s in own],
                "roles": sorted({r for s in own for r in s.roles}),
            }
        )
    if as_json:
        click.echo(json.dumps({"plugins": rows}, indent=2))
        return
    for row in rows:
        origin = row["distribution"] or "noderole (built in)"
        version = f" {row['version']}" if row["version"] else ""
        click.echo(f"{row['plugin']}  ({origin}{version})")
        for service in row["services"]:
            roles = ", ".join(service["roles"]) or "(only when needed)"
            click.echo(f"  {service['name']:<28} roles: {roles}")
    all_roles = sorted({r for row in rows for r in row["roles"]})
    click.echo(f"roles: {', '.join(all_roles) or '(none)'}")


@click.command("plan")
@role_argument
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def plan_command(app: App, role: str, as_json: bool) -> None:
    """Show what `apply ROLE` would do: order, waves, dependencies, steps and command lines.

    Secret values (tokens) are shown as ***.
    """
    plan = build_role_plan(app, role)
    if as_json:
        click.echo(json.dumps(plan.to_dict(), indent=2))
        return
    click.echo(format_plan(plan))


def format_plan(plan: Plan) -> str:
    """The human-readable plan: one block per service in start order."""
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


@click.command("graph")
@role_argument
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "dot", "mermaid"]),
    default="text",
    show_default=True,
    help="text for a terminal, dot for Graphviz, mermaid for Markdown.",
)
@click.pass_obj
def graph_command(app: App, role: str, fmt: str) -> None:
    """Draw the dependency graph of ROLE."""
    from noderole.render_graph import render_graph

    click.echo(render_graph(build_role_plan(app, role), fmt), nl=False)  # type: ignore[arg-type]
