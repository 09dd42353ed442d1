"""The CLI's own surface: version, list, plan, graph, config, completion, errors and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import noderole
from noderole.cli import cli
from noderole.cli._app import App
from noderole.errors import ExitCode
from noderole.root import NodeRoot


def _plugin() -> types.ModuleType:
    module = types.ModuleType("cliplugin")

    def noderole_settings() -> noderole.SettingsTable:
        return noderole.SettingsTable(
            table="demo",
            settings=[
                noderole.Setting(name="port", type=int, default=8132),
                noderole.Setting(name="token", type=str, default="", secret=True),
            ],
        )

    def noderole_services(node: Any) -> list[noderole.Service]:
        cfg = node.settings("demo")
        return [
            noderole.Service(
                name="web",
                description="a web server",
                roles=["front"],
                need=["net"],
                command=["/usr/bin/web", f"--port={cfg['port']}"],
                environment={"TOKEN": noderole.Secret("hunter2")},
                pre_start=[noderole.WaitForPaths(paths=["/etc/web.conf"], timeout=5)],
            ),
            noderole.Service(name="db", roles=["front", "back"], command=["/usr/bin/db"]),
        ]

    module.noderole_settings = noderole.hookimpl(noderole_settings)  # type: ignore[attr-defined]
    module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
    return module


def run(tmp_path: Path, *args: str, debug: bool = False) -> Result:
    app = App(
        root=NodeRoot(tmp_path),
        plugin_objects=(("demo", _plugin()),),
        autoload=False,
        debug=debug,
    )
    return CliRunner().invoke(cli, list(args), obj=app)


class TestInspect:
    def test_version(self) -> None:
        """--version prints the package version."""
        done = subprocess.run(
            [sys.executable, "-m", "noderole", "--version"], capture_output=True, text=True
        )
        assert done.stdout.strip() == f"noderole, version {noderole.__version__}"

    def test_root_that_is_a_file_is_refused(self, tmp_path: Path) -> None:
        """--root naming a regular file is a usage error naming it; an absent one is not."""
        afile = tmp_path / "not-a-dir"
        afile.write_text("x")
        done = CliRunner().invoke(cli, ["--root", str(afile), "list"])
        assert done.exit_code == ExitCode.USAGE
        assert f"'{afile}' is a file, not a directory" in done.output
        absent = tmp_path / "new-root"
        assert CliRunner().invoke(cli, ["--root", str(absent), "--help"]).exit_code == 0

    def test_an_empty_root_is_refused(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`--root "$ROOT"` with ROOT unset meant the current directory: `plan` there made
        ./var/cache/noderole. It is a usage error saying what to give; nothing is written."""
        monkeypatch.chdir(tmp_path)
        done = CliRunner().invoke(cli, ["--root", "", "plan", "server"])
        assert done.exit_code == ExitCode.USAGE, done.output
        assert "--root is empty: name the node's root directory" in done.output
        assert list(tmp_path.iterdir()) == []

    def test_root_completes_directories(self) -> None:
        """--root asks the shell for directories, as click.Path(file_okay=False) did."""
        from noderole.cli import RootDirectory

        ctx = cli.make_context("noderole", ["--help"], resilient_parsing=True)
        root = next(p for p in cli.params if p.name == "root")
        assert isinstance(root.type, RootDirectory)
        (item,) = root.type.shell_complete(ctx, root, "/va")
        assert (item.value, item.type) == ("/va", "dir")

    def test_every_command_has_noderoles_help_option(self) -> None:
        """Each command, nested ones too, is noderole's Command or Group: its -h/--help is made
        without click's gettext lookup, prints the command's help and ends it."""
        from noderole.cli import COMMANDS, Command, Group

        pending: list[tuple[list[str], Any]] = [([], cli)]
        seen = 0
        while pending:
            path, command = pending.pop()
            assert isinstance(command, Command | Group), path
            for flag in ("-h", "--help"):
                done = CliRunner().invoke(cli, [*path, flag])
                assert done.exit_code == 0, (path, done.output)
                assert done.output.startswith(f"Usage: cli {' '.join(path)}".rstrip())
                assert "-h, --help  " in done.output
                assert "Show this message and exit." in done.output
            seen += 1
            if isinstance(command, Group):
                ctx = command.make_context("cli", ["--help"], resilient_parsing=True)
                for name in command.list_commands(ctx):
                    pending.append(([*path, name], command.get_command(ctx, name)))
        assert seen > len(COMMANDS)  # the groups' subcommands were walked too

    def test_help_names_follow_the_context(self) -> None:
        """A command invoked on its own takes click's default --help only; invoked under
        `noderole` afterwards, -h works too (the option is remade for the other names)."""
        from noderole.cli._cert import cert

        alone = CliRunner().invoke(cert, ["-h"])
        assert alone.exit_code == ExitCode.USAGE
        assert "No such option: -h" in alone.output or "No such option '-h'" in alone.output
        assert CliRunner().invoke(cert, ["--help"]).exit_code == 0
        done = CliRunner().invoke(cli, ["cert", "-h"])
        assert done.exit_code == 0, done.output
        assert "Usage: cli cert" in done.output

    def test_list_json_names_plugins_services_and_roles(self, tmp_path: Path) -> None:
        """list --json shows each plugin with its services and roles."""
        data = json.loads(run(tmp_path, "list", "--json").stdout)
        demo = next(p for p in data["plugins"] if p["plugin"] == "demo")
        assert demo["roles"] == ["back", "front"]
        assert [s["name"] for s in demo["services"]] == ["db", "web"]
        builtin = next(p for p in data["plugins"] if p["plugin"] == "builtin")
        assert {s["name"] for s in builtin["services"]} == {"net", "cgroups"}

    def test_plan_text_shows_order_steps_and_hides_secrets(self, tmp_path: Path) -> None:
        """plan shows waves, steps and the command line; a Secret value never appears."""
        result = run(tmp_path, "plan", "front")
        # /etc/web.conf is missing and nothing in the role writes it: web would fail (exit 12).
        assert result.exit_code == ExitCode.WOULD_FAIL, result.output
        assert "1 would fail (web: waits up to 5s for /etc/web.conf" in result.stdout
        assert "wave 0: db, net" in result.stdout
        assert "wave 1: web" in result.stdout
        assert "pre-start 1: wait up to 5s for all readable: /etc/web.conf" in result.stdout
        assert "command: /usr/bin/web --port=8132" in result.stdout
        assert "env: TOKEN=***" in result.stdout
        assert "hunter2" not in result.stdout
        assert "hunter2" not in run(tmp_path, "plan", "front", "--json").stdout

    def test_unknown_role_lists_known_roles_with_plan_exit_code(self, tmp_path: Path) -> None:
        """An unknown role fails with exit 6 and lists the known roles, without a traceback."""
        result = run(tmp_path, "plan", "nope")
        assert result.exit_code == ExitCode.PLAN
        assert "unknown role 'nope'" in result.stderr
        assert "back, front" in result.stderr
        assert "Traceback" not in result.stderr

    @pytest.mark.parametrize("command", ["status", "stop", "renew"])
    def test_no_role_recorded_names_the_command_run(self, tmp_path: Path, command: str) -> None:
        """No role given or recorded: exit 2, and the hint names the command that was run."""
        result = run(tmp_path, command)
        assert result.exit_code == ExitCode.USAGE, result.output
        assert f"name one (noderole {command} ROLE) or apply a role first" in result.stderr

    def test_debug_shows_the_traceback(self, tmp_path: Path) -> None:
        """--debug lets the exception through instead of the one-paragraph message."""
        result = run(tmp_path, "plan", "nope", debug=True)
        assert result.exception is not None
        assert type(result.exception).__name__ == "PlanError"

    def test_debug_shows_the_traceback_from_the_command_too(self, tmp_path: Path) -> None:
        """The `noderole` command itself (not click's test runner) prints the traceback under
        --debug, then the one-paragraph message, and keeps the error's exit code. (It printed
        the message alone: the console entry point caught what --debug let through.)"""
        done = subprocess.run(
            [sys.executable, "-m", "noderole", "--root", str(tmp_path), "--debug", "plan", "nope"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == ExitCode.PLAN, done.stderr
        assert "Traceback (most recent call last):" in done.stderr
        assert "noderole.errors.PlanError: unknown role 'nope'" in done.stderr
        assert done.stderr.splitlines()[-1].startswith("noderole: error: unknown role 'nope'")
        plain = subprocess.run(
            [sys.executable, "-m", "noderole", "--root", str(tmp_path), "plan", "nope"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert plain.returncode == ExitCode.PLAN
        assert "Traceback" not in plain.stderr

    def test_graph_formats(self, tmp_path: Path) -> None:
        """graph renders text, dot and mermaid."""
        assert run(tmp_path, "graph", "front", "--format", "dot").stdout.startswith("digraph")
        assert run(tmp_path, "graph", "front", "--format", "mermaid").stdout.startswith("graph TD")
        assert "web" in run(tmp_path, "graph", "front").stdout


class TestConfig:
    def test_config_show_json_has_sources_and_masks_secrets(self, tmp_path: Path) -> None:
        """config show --json gives each value with its source; secrets show as ***."""
        path = tmp_path / "etc/noderole/config.toml"
        path.parent.mkdir(parents=True)
        path.write_text('[demo]\nport = 9000\ntoken = "s3cret"\n')
        result = run(tmp_path, "config", "show", "--json")
        data = json.loads(result.stdout)
        assert data["tables"]["demo"]["port"] == {
            "value": 9000,
            "source": "/etc/noderole/config.toml",
            "type": "int",
            "default": 8132,
        }
        assert data["tables"]["demo"]["token"]["value"] == "***"
        assert data["tables"]["noderole"]["net_check"]["source"] == "default"
        assert "s3cret" not in result.stdout
        assert "s3cret" not in run(tmp_path, "config", "show").stdout

    def test_config_error_exit_code(self, tmp_path: Path) -> None:
        """A typo in config.toml fails with exit 4 naming file, table and key."""
        path = tmp_path / "etc/noderole/config.toml"
        path.parent.mkdir(parents=True)
        path.write_text("[demo]\nprot = 1\n")
        result = run(tmp_path, "plan", "front")
        assert result.exit_code == ExitCode.CONFIG
        assert (
            "/etc/noderole/config.toml:demo.prot: unknown key (did you mean 'port'?)"
            in result.stderr
        )


class TestCompletion:
    @pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
    def test_completion_script(self, shell: str) -> None:
        """completion SHELL prints a script that hooks noderole's completion variable."""
        result = CliRunner().invoke(cli, ["completion", shell])
        assert result.exit_code == 0
        assert "_NODEROLE_COMPLETE" in result.stdout

    def test_role_completion_lists_roles(self, tmp_path: Path) -> None:
        """Completing ROLE offers the roles the plugins declare."""
        from click.shell_completion import ShellComplete

        app = App(root=NodeRoot(tmp_path), plugin_objects=(("demo", _plugin()),), autoload=False)
        completer = ShellComplete(cli, {"obj": app}, "noderole", "_NODEROLE_COMPLETE")
        offered = [item.value for item in completer.get_completions(["plan"], "f")]
        assert offered == ["front"]
