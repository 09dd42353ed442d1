"""``noderole render ROLE --backend openrc|systemd``: write init files for a role."""

from __future__ import annotations

import click

from noderole.cli import Command
from noderole.cli._app import App
from noderole.cli._options import role_argument

__all__ = ["render_command"]


@click.command("render", cls=Command)
@role_argument
@click.option(
    "--backend",
    type=click.Choice(["openrc", "systemd"]),
    required=True,
    help="Which init system's files to write.",
)
@click.option(
    "--static",
    is_flag=True,
    help=(
        "Write each command's arguments into the file instead of `noderole exec NAME` "
        "(values only known at boot, such as first-boot.env's, are then frozen at render time)."
    ),
)
@click.pass_obj
def render_command(app: App, role: str, backend: str, static: bool) -> None:
    """Write OpenRC runscripts or systemd units (and their enablement) for every service of ROLE.

    Works at image build time under --root without a running init; files name the paths as the
    booted machine sees them. Rendering is deterministic and atomic; unchanged files are left
    untouched, and files an earlier render wrote for services no longer in the role are removed
    (listed in /var/lib/noderole/rendered-BACKEND.json). ROLE is recorded as the node's role,
    so `noderole hook` and `noderole exec` at boot define the services as ROLE has them.
    """
    result = app.render(role, backend, static=static)
    for warning in app.warnings:
        click.echo(f"noderole: warning: {warning}", err=True)
    for item in result.items:
        mark = "written" if item.path in result.changed else "unchanged"
        click.echo(f"{mark:<9} {item.path}")
    for path in result.removed:
        click.echo(f"{'removed':<9} {path}")
