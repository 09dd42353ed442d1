"""``noderole enable ROLE`` and ``noderole disable``: noderole's own boot entry.

The logic lives in :mod:`noderole.bootentry`; this module checks the role against the plugins
(an unknown role is refused before anything is written) and picks the init system.
"""

from __future__ import annotations

import click

from noderole.cli import Command
from noderole.cli._app import App
from noderole.cli._options import optional_role_argument
from noderole.errors import ExitCode, UsageError

__all__ = ["disable_command", "enable_command"]


def _kind(app: App, requested: str) -> str:
    if requested != "auto":
        return requested
    if not app.root.is_real:
        raise UsageError(
            "under --root the image's init system cannot be detected: pass --backend openrc "
            "or --backend systemd"
        )
    from noderole.backends.detect import detect_init

    found = detect_init(app.root)
    if found == "native":
        raise UsageError(
            "neither systemd nor OpenRC runs this machine, so there is no boot to hook into: "
            "pass --backend openrc or --backend systemd (or start `noderole apply ROLE` from "
            "your own boot script)"
        )
    return found


@click.command("enable", cls=Command)
@optional_role_argument
@click.option(
    "--backend",
    type=click.Choice(["auto", "openrc", "systemd"]),
    default="auto",
    show_default=True,
    help="The init system that runs the boot entry (auto: the running one; required with --root).",
)
@click.pass_obj
def enable_command(app: App, role: str | None, backend: str) -> None:
    """Record ROLE and install noderole's boot entry, which applies the node's role at every boot.

    Without ROLE nothing is recorded: the first boot applies the role the plugins resolve from
    the node's first-boot inputs (the k3s plugin: SPINIFEX_K3S_ROLE), and records it.

    OpenRC: /etc/init.d/noderole in the default runlevel, after cloud-init. systemd: the
    oneshot noderole.service, wanted by multi-user.target, after network-online.target and
    cloud-final.service. Undo with `noderole disable`.
    """
    from noderole.bootentry import enable

    if role is not None:
        app.plan(role)  # an unknown role fails here, naming the known ones
    kind = _kind(app, backend)
    noderole_path = app.noderole_path()
    written = enable(
        app.root,
        role,
        kind,
        noderole_path=noderole_path,
        renew_interval=float(app.setting("renew_interval")),
        renew_jitter=float(app.setting("renew_jitter")),
    )
    recorded = f"role {role} recorded" if role else "role left to the first boot's inputs"
    click.echo(f"{recorded}; {kind} boot entry: {', '.join(written)}")


@click.command("disable", cls=Command)
@click.pass_obj
def disable_command(app: App) -> None:
    """Remove the boot entry `noderole enable` wrote (and nothing else).

    A file changed since enable wrote it is kept and named (exit 1). The recorded role stays.
    """
    from noderole.backends.systemd import reload_after_removal
    from noderole.bootentry import disable

    removed, kept = disable(app.root)
    reload_after_removal(app.root, removed)
    if not removed and not kept:
        click.echo("no boot entry enabled: nothing to remove")
        return
    for path in removed:
        click.echo(f" * removed {path}")
    for path in kept:
        click.echo(f"{path} changed since noderole enable wrote it: left in place", err=True)
    if kept:
        raise SystemExit(int(ExitCode.FAILED))
