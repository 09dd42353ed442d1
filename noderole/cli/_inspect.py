"""``noderole list``, ``plan`` and ``graph``: look at what the plugins contribute, start nothing."""

from __future__ import annotations

import json
from typing import Any

import click

from noderole.cli import Command
from noderole.cli._app import App
from noderole.cli._options import role_argument
from noderole.cli._output import format_plan

__all__ = ["graph_command", "list_command", "plan_command"]


@click.command("list", cls=Command)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_command(app: App, as_json: bool) -> None:
    """List installed plugins with their version, distribution, services and roles."""
    services = app.services()
    _warn_plugins(app)
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


def _warn_plugins(app: App) -> None:
    """Print, on stderr and once, what looked wrong in the plugins as they loaded (a plugin that
    implements no hook, an optional hook of a name nothing declares)."""
    for warning in app.plugins.warnings:
        if warning not in app.warned:
            app.warned.add(warning)
            click.echo(f"noderole: warning: {warning}", err=True)
        if warning in app.warnings:
            app.warnings.remove(warning)


@click.command("plan", cls=Command)
@role_argument
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def plan_command(app: App, role: str, as_json: bool) -> None:
    """Show what `apply ROLE` would do: order, waves, dependencies, steps and command lines.

    Ends with a verdict; exit 12 when a service would fail for a reason known now.

    Secret values (tokens) are shown as ***.
    """
    from noderole.dryrun import known_failures, short
    from noderole.errors import ExitCode

    plan = app.plan(role)
    _warn_plugins(app)
    backend = app.backend_name("auto")
    failures = known_failures(plan, app.root)
    if as_json:
        document = plan.to_dict()
        document["backend"] = backend
        document["would_fail"] = failures
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(format_plan(plan))
        fail = [
            f"{n}: {short(why.removeprefix('fail: '))}"
            for n, why in failures.items()
            if why.startswith("fail")
        ]
        skipped = sum(1 for why in failures.values() if why.startswith("skip"))
        total = len(plan.services)
        verdict = f"{total - len(failures)} would start"
        if fail:
            verdict += f", {len(fail)} would fail ({'; '.join(fail)})"
        if skipped:
            verdict += f", {skipped} skipped"
        click.echo(f"\n{total} services: {verdict} (backend {backend})")
    if failures:
        raise SystemExit(int(ExitCode.WOULD_FAIL))


@click.command("graph", cls=Command)
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
    from noderole.render.graph import render_graph

    click.echo(render_graph(app.plan(role), fmt), nl=False)  # type: ignore[arg-type]
