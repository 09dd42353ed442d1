"""``noderole env``: look at environment files the way noderole parses them."""

from __future__ import annotations

import json
import re
import shlex

import click

from noderole.cli import Group
from noderole.cli._app import App
from noderole.errors import EnvFileError, UsageError
from noderole.root import climbs_out

__all__ = ["SECRET_KEY", "env"]

SECRET_KEY = re.compile(r"TOKEN|SECRET|PASSWORD|KEY", re.IGNORECASE)
"""Keys whose values ``env show`` hides unless ``--show-secrets``."""


@click.group(cls=Group)
def env() -> None:
    """Environment files (KEY=VALUE), parsed as data: nothing in them is executed."""


@env.command("show")
@click.argument("file", metavar="FILE")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of lines.")
@click.option(
    "--show-secrets",
    is_flag=True,
    help="Show values of keys containing TOKEN, SECRET, PASSWORD or KEY instead of ***.",
)
@click.pass_obj
def show(app: App, file: str, as_json: bool, show_secrets: bool) -> None:
    """Print the values FILE assigns, one KEY=VALUE per line, shell-quoted.

    FILE is a node path (/etc/spinifex-eks/first-boot.env), read under --root. Skipped lines are
    reported on stderr as FILE:LINE: why.
    """
    from noderole.envfile import read_env_file

    if not file.startswith("/") or climbs_out(file):
        raise UsageError(
            f"env show: FILE must be an absolute node path such as /etc/x.env (without '..' "
            f"climbing above /), got {file!r}"
        )
    parsed = read_env_file(app.root.resolve(file), display_path=file)
    if not parsed.exists:
        where = "" if app.root.is_real else f" (looked under --root {app.root.path})"
        raise EnvFileError(f"environment file {file} does not exist{where}; check the path")
    hidden = {key for key in parsed.values if not show_secrets and SECRET_KEY.search(key)}
    for warning in parsed.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        values = {k: "***" if k in hidden else v for k, v in parsed.values.items()}
        document = {"path": file, "values": values, "warnings": list(parsed.warnings)}
        click.echo(json.dumps(document, indent=2))
        return
    for key, value in parsed.values.items():
        click.echo(f"{key}={'***' if key in hidden else shlex.quote(value)}")
