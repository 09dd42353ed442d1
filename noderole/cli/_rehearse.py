"""``noderole rehearse ROLE``: the main job, end to end, on any machine, without privileges.

Makes a scratch root, writes the stand-ins plugins supply (``noderole_standins``: small programs
that behave like the real ones where the boot cares, and the input files a boot would find),
runs ``apply`` with its normal progress output, shows ``status``, then stops everything and
removes the scratch root (unless ``--keep``). Useful in an image's CI and as a first look.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import click

from noderole.cli._app import App
from noderole.cli._inspect import build_role_plan, role_argument
from noderole.errors import ExitCode, UsageError
from noderole.root import NodeRoot

__all__ = ["rehearse_command"]

REHEARSAL_CONFIG = """\
# Written by `noderole rehearse`: the scratch root has no network of its own to wait for.
[noderole]
net_check = false
"""


def stage_rehearsal(app: App, scratch: Path) -> App:
    """Write the config and every stand-in under ``scratch``; return an App rooted there."""
    rehearsal = App(
        root=NodeRoot(scratch),
        debug=app.debug,
        disabled_plugins=app.disabled_plugins,
        clock=app.clock,
        plugin_objects=app.plugin_objects,
        autoload=app.autoload,
    )
    config = scratch / "etc/noderole/config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(REHEARSAL_CONFIG)
    for standin in rehearsal.plugins.standins(rehearsal.node):
        target = rehearsal.root.resolve(standin.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(standin.content)
        target.chmod(standin.mode)
    return rehearsal


@click.command("rehearse")
@role_argument
@click.option("--keep", is_flag=True, help="Keep the scratch root (and leave nothing running).")
@click.pass_obj
def rehearse_command(app: App, role: str, keep: bool) -> None:
    """Rehearse `apply ROLE` in a scratch root with the plugins' stand-in executables."""
    from noderole.backends.native import NativeBackend
    from noderole.cli._apply import run_apply, show_status

    if not app.root.is_real:
        raise UsageError("rehearse makes its own scratch root; do not combine it with --root")
    scratch = Path(tempfile.mkdtemp(prefix=f"noderole-rehearse-{role}-"))
    click.echo(f"rehearsing role {role} in {scratch}")
    ok = False
    backend = None
    try:
        rehearsal = stage_rehearsal(app, scratch)
        plan = build_role_plan(rehearsal, role)
        backend = NativeBackend(rehearsal.root)
        report = run_apply(rehearsal, plan, backend, quiet=False, lock_timeout=30)
        ok = report.ok
        click.echo("")
        show_status(rehearsal, plan, backend, as_json=False, wait=True, timeout=30.0)
    finally:
        if backend is not None:
            backend.supervisor.shutdown()
            click.echo("\nstopped every service of the rehearsal")
        if keep:
            click.echo(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    if not ok:
        raise SystemExit(int(ExitCode.FAILED))
