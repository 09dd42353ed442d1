"""Arguments and options several commands share (imported by command modules, never the reverse)."""

from __future__ import annotations

import click

from noderole.cli._app import App
from noderole.cli._params import Seconds

__all__ = ["backend_option", "lock_timeout_option", "optional_role_argument", "role_argument"]

BACKEND_CHOICES = ("auto", "native", "openrc", "systemd")


def _complete_role(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion for ROLE: the roles the installed plugins declare."""
    app = ctx.find_object(App)
    if app is None:
        return []
    try:
        roles = {role for s in app.services() for role in s.roles}
    except Exception:  # completion must never print a traceback into the shell
        return []
    return sorted(r for r in roles if r.startswith(incomplete))


role_argument = click.argument("role", shell_complete=_complete_role)

optional_role_argument = click.argument("role", required=False, shell_complete=_complete_role)
"""``apply``'s ROLE: when omitted, the recorded role, else the plugins' answer (at boot)."""

backend_option = click.option(
    "--backend",
    type=click.Choice(BACKEND_CHOICES),
    default="auto",
    show_default=True,
    help="Who supervises the services (auto: detect the init system; native under --root).",
)

lock_timeout_option = click.option(
    "--lock-timeout",
    type=Seconds(zero=True),
    default=300.0,
    show_default=True,
    help="Seconds to wait for another apply, stop or restart to finish before refusing.",
)
