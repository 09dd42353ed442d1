"""``noderole rehearse ROLE``: the main job, end to end, on any machine, without privileges.

The command parses and prints; the rehearsal itself (staging the plugins' stand-ins, input files
and settings in a scratch root, apply, status, stop, clean-up) is :mod:`noderole.rehearsal`.
"""

from __future__ import annotations

from typing import Any

import click

from noderole.cli import Command
from noderole.cli._app import App
from noderole.cli._options import role_argument
from noderole.cli._output import echo_status
from noderole.errors import ExitCode

__all__ = ["rehearse_command"]


@click.command("rehearse", cls=Command)
@role_argument
@click.option("--keep", is_flag=True, help="Keep the scratch root (and leave nothing running).")
@click.pass_obj
def rehearse_command(app: App, role: str, keep: bool) -> None:
    """Rehearse `apply ROLE` in a scratch root with the plugins' stand-in executables."""
    from noderole.rehearsal import run_rehearsal

    def show(plan_role: str, rows: Any, verdict: ExitCode) -> None:
        echo_status(plan_role, rows, verdict, as_json=False)

    if not run_rehearsal(app, role, keep=keep, echo=click.echo, show_status=show):
        raise SystemExit(int(ExitCode.FAILED))
