"""``noderole config show``, ``noderole config check`` and ``noderole completion``."""

from __future__ import annotations

import json

import click

from noderole.cli import Command, Group
from noderole.cli._app import App
from noderole.errors import ConfigError

__all__ = ["completion_command", "config_group"]


@click.group("config", cls=Group)
def config_group() -> None:
    """Show or check the configuration (/etc/noderole/config.toml under --root)."""


@config_group.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show_command(app: App, as_json: bool) -> None:
    """Print every effective setting and where its value came from (secrets as ***)."""
    config = app.config
    if as_json:
        tables: dict[str, dict[str, dict[str, object]]] = {}
        for entry in config.entries():
            tables.setdefault(entry.table, {})[entry.setting.name] = {
                "value": entry.shown(),
                "source": entry.source,
                "type": entry.setting.type.__name__,
                "default": "***" if entry.setting.secret else entry.setting.default,
            }
        click.echo(
            json.dumps(
                {"file": config.path, "found": config.file_found, "tables": tables}, indent=2
            )
        )
        return
    found = "" if config.file_found else "  (not present: all defaults)"
    click.echo(f"# {config.path}{found}")
    table = None
    for entry in config.entries():
        if entry.table != table:
            table = entry.table
            click.echo(f"\n[{table}]")
        value = entry.shown()
        text = json.dumps(value) if not isinstance(value, bool) else str(value).lower()
        click.echo(f"{entry.setting.name} = {text}  # {entry.source}")


@config_group.command("check")
@click.pass_obj
def check_command(app: App) -> None:
    """Validate every table and value of the configuration file; print "ok" or every problem.

    Checks types, declared ranges and choices, unknown tables and keys (with a suggestion), and
    values the plugins' own records refuse (a pidfile whose '..' leaves the root). Each problem
    names FILE:TABLE.KEY. Exit 0 when the file is valid (or absent), 4 otherwise.
    """
    from noderole.config import check_config
    from noderole.records import in_words

    config, problems = check_config(
        # The file itself, never the stored parse: this is how the operator checks what he wrote.
        app.root,
        app.plugins.settings_tables(),
        disabled=app.disabled_plugins,
        cached=False,
    )
    if config is not None and not problems:
        # Values a plugin's records refuse are only seen when the plugins build them.
        from noderole.context import NodeContext

        node = NodeContext(
            root=app.root,
            config=config,
            pluginmanager=app.plugins.manager,
            clock=app.clock,
            plugins=app.plugins,
        )
        try:
            app.plugins.services(node)
        except ConfigError as error:
            problems.append(str(error))
        problems += app.own_settings_problems()
    if problems or config is None:
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        raise ConfigError("\n".join([*problems, f"config check: {count} found"]))
    path = config.path
    if not config.file_found:
        click.echo(f"ok: {path} not present; every setting has its default")
        return
    tables = len(config.values)
    set_here = sum(1 for entry in config.entries() if entry.source == path)
    unchecked = ""
    if config.unchecked:
        skipped = in_words([f"[{name}]" for name in config.unchecked])
        whose = "whose plugin is" if len(config.unchecked) == 1 else "whose plugins are"
        unchecked = f"; not checked: {skipped}, {whose} disabled"
    click.echo(f"ok: {path} ({set_here} values set, {tables} tables checked{unchecked})")


@click.command("completion", cls=Command)
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def completion_command(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL.

    Bash: `eval "$(noderole completion bash)"` in ~/.bashrc.
    """
    from click.shell_completion import get_completion_class

    root = ctx.find_root()
    completion_class = get_completion_class(shell)
    if completion_class is None:  # pragma: no cover - the Choice above guards it
        raise click.UsageError(f"unsupported shell {shell}")
    completer = completion_class(root.command, {}, "noderole", "_NODEROLE_COMPLETE")
    click.echo(completer.source())
