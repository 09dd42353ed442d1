"""``noderole hook`` and ``noderole exec``: what rendered OpenRC and systemd files call at boot.

The init system owns ordering and supervision; noderole still owns the definition. A runscript's
``start_pre()`` (or a unit's ``ExecStartPre=``) runs ``noderole hook NAME start-pre``, and its
command is ``noderole exec NAME``, which re-evaluates the plugins and ``exec``s the resolved argv.
That is how a value only known at boot (the konnectivity server count in first-boot.env) reaches
the command line without shell tricks — and without a ``$`` that systemd would expand itself.
"""

from __future__ import annotations

import os
import sys

import click

from noderole.cli import Command
from noderole.cli._app import App
from noderole.errors import StepError, UsageError

__all__ = ["exec_command", "hook_command"]


@click.command("hook", cls=Command)
@click.argument("name")
@click.argument("phase", type=click.Choice(["start-pre", "start-post", "stop-post"]))
@click.pass_obj
def hook_command(app: App, name: str, phase: str) -> None:
    """Run one service's steps for PHASE; non-zero with the reason when one fails.

    start-pre runs the pre-start steps (waits, certificates); start-post waits for the readiness
    check, if any; stop-post has nothing to do today and succeeds.
    """
    from noderole.stepcontext import StepContext
    from noderole.steps import run_steps

    service = app.service(name)

    def progress(what: str) -> None:
        click.echo(f" * {name}: {what}", err=True)

    ctx = StepContext(service=name, root=app.root, clock=app.clock, progress=progress)
    try:
        if phase == "start-pre":
            for result in run_steps(service.pre_start, ctx):
                click.echo(f" * {name}: {result.step.describe()}: {result.detail}", err=True)
        elif phase == "start-post" and service.readiness is not None:
            from noderole.waits import run_wait

            run_wait(service.readiness, root=app.root, clock=app.clock, progress=progress)
    except StepError as exc:
        click.echo(f" * ERROR: {name}: {exc}", err=True)
        raise SystemExit(1) from None


@click.command("exec", cls=Command, context_settings={"ignore_unknown_options": True})
@click.option(
    "--logs-and-user",
    is_flag=True,
    help="Open the service's logs and take its user and group first (run as root).",
)
@click.argument("name")
@click.pass_obj
def exec_command(app: App, name: str, logs_and_user: bool) -> None:
    """Replace this process with service NAME's command, resolved now.

    The environment is the caller's (the init system's) plus the service's own; secrets are
    revealed only into the exec'd process. The service's working directory is entered as the
    native supervisor enters it (no link a user planted is followed). With --logs-and-user
    (what a systemd unit asks, run privileged), the service's logs are opened as the native
    supervisor opens them and its user and group are taken, before the exec.
    """
    service = app.service(name)
    if service.command is None:
        raise UsageError(f"service {name!r} has no command to exec (it is a milestone)")
    program = str(app.root.resolve(service.command[0]))
    environment = {**os.environ, **app.root.environment(), **service.revealed_environment()}
    sys.stdout.flush()
    sys.stderr.flush()
    if service.working_directory:
        # Entered here, as the native supervisor's child enters it, never by the init system:
        # systemd (ExecStart=+) and supervise-daemon change directory as root, through a link
        # the service's user may have planted there, before they take the user. Before the
        # user is taken (--logs-and-user), or as him (OpenRC's command_user).
        from noderole.supervisor._child import SpawnError, enter_directory

        try:
            enter_directory(app.root.local(service.working_directory))
        except SpawnError as exc:
            raise UsageError(f"cannot exec {name}: {exc}") from None
    if logs_and_user:
        # A systemd unit runs this as root (ExecStart=+): the logs are opened here, as the
        # native supervisor opens them, and only then is the service's user taken.
        from noderole.supervisor._child import SpawnError, become

        def warn(message: str) -> None:
            click.echo(f"noderole: {name}: {message}", err=True)

        try:
            become(
                stdout_log=app.root.local(service.output_log) if service.output_log else None,
                stderr_log=app.root.local(service.error_log) if service.error_log else None,
                user=service.user,
                group=service.group,
                warn=warn,
            )
        except SpawnError as exc:
            raise UsageError(f"cannot exec {name}: {exc}") from None
    try:
        os.execve(program, list(service.command), environment)
    except OSError as exc:
        from noderole.supervisor._execerror import why_not

        raise UsageError(
            f"cannot exec {service.command[0]} for {name}: {why_not(program, exc)}"
        ) from exc
