"""The ``noderole`` command.

Subcommands live in their own modules and are imported only when invoked (:class:`LazyGroup`), so
``noderole --help`` at boot imports click and this package, not cryptography or any plugin.
Errors noderole raises on purpose are printed as one paragraph on stderr with the exit code their
class carries; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import stat
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import click

from noderole.__about__ import __version__
from noderole.errors import ExitCode, NoderoleError

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

# Imported where used, not here: `noderole --help` must stay as cheap as `import click`.
ROOT_ENV = "NODEROLE_ROOT"  # noderole.root.ROOT_ENV, repeated so --help need not import it

__all__ = [
    "COMMANDS",
    "Command",
    "Group",
    "HelpContext",
    "LazyGroup",
    "RootDirectory",
    "cli",
    "main",
    "run",
    "terminal_columns",
]

COMMANDS: dict[str, tuple[str, str]] = {
    # name: ("module:attribute", short help shown by --help without importing the module)
    "apply": (
        "noderole.cli._apply:apply_command",
        "Bring every service of a role up and keep it up.",
    ),
    "status": ("noderole.cli._apply:status_command", "Show each service's state, pid and uptime."),
    "stop": ("noderole.cli._apply:stop_command", "Stop a role or services, in reverse order."),
    "restart": ("noderole.cli._apply:restart_command", "Restart services (pre-start steps again)."),
    "cert": ("noderole.cli._cert:cert", "Mint or check serving certificates."),
    "renew": ("noderole.cli._renew:renew_command", "Renew running services' certificates."),
    "reset": ("noderole.cli._reset:reset_command", "Stop a role, remove what noderole wrote."),
    "env": ("noderole.cli._env:env", "Show how an environment file is parsed."),
    "wait": ("noderole.cli._wait:wait", "Wait, bounded, for paths, sockets, ports or URLs."),
    "hook": (
        "noderole.cli._boot:hook_command",
        "Run one service's steps (called by OpenRC/systemd).",
    ),
    "exec": (
        "noderole.cli._boot:exec_command",
        "Exec a service's resolved command (for init files).",
    ),
    "render": ("noderole.cli._render:render_command", "Write OpenRC or systemd files for a role."),
    "enable": ("noderole.cli._enable:enable_command", "Record a role and apply it at every boot."),
    "disable": ("noderole.cli._enable:disable_command", "Remove the boot entry enable wrote."),
    "rehearse": ("noderole.cli._rehearse:rehearse_command", "Rehearse a role in a scratch root."),
    "list": ("noderole.cli._inspect:list_command", "List plugins, their services and roles."),
    "plan": ("noderole.cli._inspect:plan_command", "Show what applying a role would do, in order."),
    "graph": ("noderole.cli._inspect:graph_command", "Draw a role's dependency graph."),
    "config": ("noderole.cli._config:config_group", "Show or check the configuration."),
    "completion": (
        "noderole.cli._config:completion_command",
        "Print the shell completion script.",
    ),
}


def terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``, without importing shutil (which imports bz2,
    lzma and zlib with it): ``COLUMNS`` when set, else standard output's terminal, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class HelpContext(click.Context):
    """A context whose help formatter is as wide as click's, sized without shutil."""

    def make_formatter(self) -> click.HelpFormatter:
        width = self.terminal_width
        if width is None:
            from click import formatting

            width = formatting.FORCED_WIDTH  # set by click's test runner
        if width is None:
            max_width = 80 if self.max_content_width is None else self.max_content_width
            width = max(min(terminal_columns(), max_width) - 2, 50)
        return self.formatter_class(width=width, max_width=self.max_content_width)


_HELP_TEXT = "Show this message and exit."
_VERSION_TEXT = "Show the version and exit."


def _show_help(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(ctx.get_help(), color=ctx.color)
        ctx.exit()


class _OwnHelpOption(click.Command):
    """``-h``/``--help`` made here, with its text, rather than by ``click.help_option``.

    click builds each command's help option when the command line is parsed, and asks
    :func:`gettext.gettext` for its text; with no catalog installed (click ships none), every
    lookup searches the locale directories again and the first one imports :mod:`locale` (4M
    instructions, 2% of a re-apply). The option is otherwise click's: same names, eager, not
    passed to the command, the help page printed and the program ended.
    """

    context_class = HelpContext
    _own_help: click.Option | None = None

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        names = self.get_help_option_names(ctx)
        if not names or not self.add_help_option:
            return None
        if self._own_help is None or self._own_help.opts != names:
            # Kept while the names stay (click orders eager callbacks by the option's identity);
            # remade when a context asks for other names (the command invoked on its own).
            self._own_help = click.Option(
                [*names, "noderole_help"],  # its own name: never a command's `help` parameter
                is_flag=True,
                expose_value=False,
                is_eager=True,
                callback=_show_help,
                help=_HELP_TEXT,
            )
        return self._own_help


class Command(_OwnHelpOption):
    """Every noderole subcommand's class (``@click.command(..., cls=Command)``)."""


class Group(_OwnHelpOption, click.Group):
    """A subcommand group (``cert``, ``config``, ``env``); its subcommands are :class:`Command`."""

    command_class = Command


class LazyGroup(Group):
    """A group whose subcommands are imported on first use, listed from :data:`COMMANDS`."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            target, _ = self.lazy[cmd_name]
            module_name, attribute = target.split(":")
            command = getattr(importlib.import_module(module_name), attribute)
            if not isinstance(command, click.Command):  # pragma: no cover - registry mistake
                raise TypeError(f"{target} is not a click command")
            return command
        return super().get_command(ctx, cmd_name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # kubectl and systemctl take global options anywhere: move them before the command.
        return super().parse_args(ctx, hoist_global_options(args, self.lazy))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3)
            hint = f" Did you mean {' or '.join(close)}?" if close else ""
            ctx.fail(f"no such command {name!r}.{hint} (noderole --help lists them)")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing uses the registry's short help, so --help imports no subcommand module.
        rows = [(name, self.lazy[name][1]) for name in sorted(self.lazy)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            # Caught here, before click turns it into "Aborted!" and status 1, which the exit
            # codes keep for a failed service. What was started keeps running; locks die with us.
            terminal = sys.stderr is not None and sys.stderr.isatty()
            after_echo = "\n" if terminal else ""  # past the terminal's ^C
            click.echo(f"{after_echo}noderole: interrupted", err=True)
            ctx.exit(ExitCode.INTERRUPTED)
        except NoderoleError as exc:
            from noderole.cli._app import App

            app = ctx.find_object(App)
            if app is not None and app.debug:
                # Printed here: an embedder (or a test) gets the exception, and the command,
                # whose entry point turns it into the message and the exit code, shows it too.
                import traceback

                traceback.print_exc()
                raise
            for warning in app.warnings if app is not None else ():
                click.echo(f"noderole: warning: {warning}", err=True)
            click.echo(f"noderole: error: {exc}", err=True)
            ctx.exit(int(exc.exit_code))


def _show_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--version``: what ``click.version_option`` prints, without its gettext lookups."""
    if value and not ctx.resilient_parsing:
        click.echo(f"noderole, version {__version__}", color=ctx.color)
        ctx.exit()


class RootDirectory(click.ParamType[str]):
    """``--root``'s value: a path that is not a regular file (it need not exist yet).

    What ``click.Path(file_okay=False)`` checks and completes, without the gettext lookup its
    constructor makes on every start.
    """

    name = "directory"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        path = os.fsdecode(value)
        if not path:  # `--root "$ROOT"` with ROOT unset: not the current directory
            self.fail("--root is empty: name the node's root directory (/ for this machine)")
        try:
            regular = stat.S_ISREG(os.stat(path).st_mode)
        except (OSError, ValueError):
            regular = False  # absent or unreadable: NodeRoot says what is wrong with it
        if regular:
            self.fail(f"{path!r} is a file, not a directory: name the node's root directory")
        return path

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(incomplete, type="dir")]


GLOBAL_VALUE_OPTIONS = ("--root", "--disable-plugin")
"""Options of the ``noderole`` group that take a value (accepted after the command too)."""
GLOBAL_FLAGS = ("--debug",)
"""Flags of the ``noderole`` group (accepted after the command too)."""


def hoist_global_options(
    args: Sequence[str], commands: Sequence[str] | dict[str, Any]
) -> list[str]:
    """``args`` with the group's options that follow the command moved before it.

    Nothing after ``--`` moves (``exec`` passes arguments through), nor anything when no command
    is named.
    """
    args = list(args)
    position = next(
        (i for i, arg in enumerate(args) if arg in commands and _is_command_slot(args, i)), None
    )
    if position is None:
        return args
    before, rest = args[:position], args[position:]
    kept: list[str] = []
    index = 0
    while index < len(rest):
        arg = rest[index]
        if arg == "--":
            kept += rest[index:]
            break
        name = arg.split("=", 1)[0]
        if name in GLOBAL_VALUE_OPTIONS:
            if "=" in arg:
                before.append(arg)
            elif index + 1 < len(rest):
                before += [arg, rest[index + 1]]
                index += 1
            else:
                kept.append(arg)  # no value: let click say so
        elif arg in GLOBAL_FLAGS:
            before.append(arg)
        else:
            kept.append(arg)
        index += 1
    return before + kept


def _is_command_slot(args: Sequence[str], index: int) -> bool:
    """True when ``args[index]`` is not the value of a global option before it."""
    return index == 0 or args[index - 1] not in GLOBAL_VALUE_OPTIONS


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_show_version,
    help=_VERSION_TEXT,
)
@click.option(
    "--root",
    type=RootDirectory(),
    metavar="DIR",
    envvar=ROOT_ENV,
    default="/",
    show_default=True,
    help=(
        "Treat DIR as the node's /: every path noderole or a plugin reads, writes or runs "
        f"resolves under it (also {ROOT_ENV}). /proc, /sys and /dev stay the real ones."
    ),
)
@click.option(
    "--disable-plugin",
    "disabled",
    multiple=True,
    metavar="NAME",
    help="Do not load this plugin (repeatable); acts before import.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-paragraph errors.")
@click.pass_context
def cli(ctx: click.Context, root: str, disabled: Sequence[str], debug: bool) -> None:
    """Apply a Kubernetes node role at boot.

    `noderole apply server` turns this machine into a control-plane node, `noderole apply agent`
    into a worker. Services come from plugins, ordered by their dependencies, each with its
    pre-start steps and a supervised command.

    Exit codes: 0 ok, 1 a service failed, 2 usage, 3 plugin, 4 config, 5 definition, 6 plan,
    7 certificate, 8 env file, 9 locked, 10 backend, 11 still starting (status), 12 would fail
    (plan, apply --dry-run), 130 interrupted (Ctrl-C).
    """
    from noderole.cli._app import App
    from noderole.root import NodeRoot

    if isinstance(ctx.obj, App):
        # Embedding and tests pass a ready App (with plugin objects, a fake clock): keep it.
        ctx.obj.debug = ctx.obj.debug or debug
        ctx.obj.disabled_plugins = (*ctx.obj.disabled_plugins, *disabled)
        return
    ctx.obj = App(root=NodeRoot(root), debug=debug, disabled_plugins=tuple(disabled))


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="noderole")
    except KeyboardInterrupt:  # pragma: no cover - Ctrl-C outside a command (invoke takes those)
        click.echo("noderole: interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except NoderoleError as exc:  # raised before a subcommand ran (e.g. in the group itself)
        if os.environ.get("NODEROLE_DEBUG"):
            raise
        click.echo(f"noderole: error: {exc}", err=True)
        sys.exit(int(getattr(exc, "exit_code", ExitCode.FAILED)))


def run() -> NoReturn:
    """The ``noderole`` command (and ``python -m noderole``): :func:`main`, then out at once.

    The interpreter's own finalization, collecting every module and object loaded (about 30 ms
    after an apply here), buys a one-shot command nothing: its files are written and closed
    (atomically, synced where that matters), its service threads are done, and the supervisor
    and services it started live on detached. The output is flushed first; the exit status is
    :func:`main`'s. Embedders and tests call :func:`main`, which returns or raises as before.
    """
    try:
        main()
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc.code)
    # The tries of waits in threads os._exit would leave behind (as _start.end_wait_attempts
    # does for a signal; not imported from there: _start imports this module).
    # Loaded only by a wait; without end_attempts while its import was under way.
    end_attempts = getattr(sys.modules.get("noderole.supervisor.probes"), "end_attempts", None)
    if end_attempts is not None:
        end_attempts()
    for stream in (sys.stdout, sys.stderr):
        # A reader that went away (a closed pipe): nothing left to tell it. None: a descriptor
        # the caller closed, when this runs without noderole._start (which opens /dev/null).
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(status)


def _exit_status(code: object) -> int:
    """What ``sys.exit(code)`` exits with (a message is printed, as Python does, with 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(OSError, ValueError):
        print(code, file=sys.stderr)
    return 1
