"""Values people type meet clear errors: config check, bad numbers and paths, wait and env show."""

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
from noderole.cli._params import Seconds, seconds_text
from noderole.clock import FakeClock
from noderole.errors import ExitCode
from noderole.root import NodeRoot

CONFIG = "/etc/noderole/config.toml"


def _plugin() -> types.ModuleType:
    """A plugin whose service takes its pidfile and timeout from its settings."""
    module = types.ModuleType("valueplugin")

    def noderole_settings() -> noderole.SettingsTable:
        return noderole.SettingsTable(
            table="demo",
            settings=[
                noderole.Setting(name="pidfile", type=str, default="/run/demo.pid"),
                noderole.Setting(name="wait_timeout", type=float, default=5.0, min=0),
                noderole.Setting(
                    name="mode", type=str, default="fast", choices=["fast", "careful"]
                ),
            ],
        )

    def noderole_services(node: Any) -> list[noderole.Service]:
        cfg = node.settings("demo")
        return [
            noderole.Service(
                name="demo",
                roles=["front"],
                command=["/usr/bin/demo"],
                pidfile=cfg["pidfile"],
                pre_start=[noderole.WaitForPaths(paths=["/etc/x"], timeout=cfg["wait_timeout"])],
            )
        ]

    module.noderole_settings = noderole.hookimpl(noderole_settings)  # type: ignore[attr-defined]
    module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
    return module


def run(tmp_path: Path, *args: str, clock: FakeClock | None = None) -> Result:
    app = App(
        root=NodeRoot(tmp_path),
        plugin_objects=(("demo", _plugin()),),
        autoload=False,
        clock=clock,
    )
    return CliRunner().invoke(cli, list(args), obj=app)


def write_config(root: Path, text: str) -> None:
    path = root / CONFIG.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


class TestConfigCheck:
    def test_absent_file_is_ok(self, tmp_path: Path) -> None:
        """Without a file, check says every setting has its default and exits 0."""
        result = run(tmp_path, "config", "check")
        assert result.exit_code == 0, result.output
        assert result.stdout == f"ok: {CONFIG} not present; every setting has its default\n"

    def test_valid_file_is_ok(self, tmp_path: Path) -> None:
        """A valid file prints one short ok line."""
        write_config(tmp_path, '[noderole]\nbackend = "native"\n[demo]\nmode = "careful"\n')
        result = run(tmp_path, "config", "check")
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(f"ok: {CONFIG} (2 values set, ")

    def test_every_problem_is_named_with_file_table_and_key(self, tmp_path: Path) -> None:
        """Bad choices, out-of-range numbers and typos are all reported, exit 4."""
        write_config(
            tmp_path,
            '[noderole]\nbackend = "sysvinit"\nnet_timeout = -5\n'
            '[demo]\nmode = "slow"\nwait_timout = 3\n',
        )
        result = run(tmp_path, "config", "check")
        assert result.exit_code == ExitCode.CONFIG
        err = result.stderr
        assert f"{CONFIG}:noderole.backend: 'sysvinit' is not one of 'auto', 'native'" in err
        assert f"{CONFIG}:noderole.net_timeout: -5 is below the minimum" in err
        assert f"{CONFIG}:demo.mode: 'slow' is not one of 'fast', 'careful'" in err
        assert f"{CONFIG}:demo.wait_timout: unknown key (did you mean 'wait_timeout'?)" in err
        assert "config check: 4 problems found" in err

    @pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
    def test_non_finite_numbers_are_refused(self, tmp_path: Path, value: str) -> None:
        """TOML's nan and inf never reach a timeout: wait_timeout = nan is a config error."""
        write_config(tmp_path, f"[demo]\nwait_timeout = {value}\n")
        result = run(tmp_path, "config", "check")
        assert result.exit_code == ExitCode.CONFIG
        assert f"{CONFIG}:demo.wait_timeout: {value} is not a finite number" in result.stderr
        planned = run(tmp_path, "plan", "front")
        assert planned.exit_code == ExitCode.CONFIG
        assert f"{CONFIG}:demo.wait_timeout: {value} is not a finite number" in planned.stderr

    def test_a_value_the_plugin_record_refuses_is_a_config_error(self, tmp_path: Path) -> None:
        """pidfile = "/../../../tmp/x.pid" is a valid str but leaves the root: exit 4, key named."""
        write_config(tmp_path, '[demo]\npidfile = "/../../../tmp/x.pid"\n')
        for args in (("config", "check"), ("plan", "front")):
            result = run(tmp_path, *args)
            assert result.exit_code == ExitCode.CONFIG, result.output
            assert (
                f"{CONFIG}:demo.pidfile: '/../../../tmp/x.pid' is refused by the plugin that "
                f"uses it: Service 'demo': field 'pidfile'"
            ) in result.stderr
            assert "climbs above the root" in result.stderr

    def test_broken_toml_is_one_problem(self, tmp_path: Path) -> None:
        """A file that is not TOML is reported as such, exit 4."""
        write_config(tmp_path, "[demo\n")
        result = run(tmp_path, "config", "check")
        assert result.exit_code == ExitCode.CONFIG
        assert f"{CONFIG}: not valid TOML" in result.stderr


class TestShippedSettings:
    def test_shipped_plugins_declare_bounds(self, tmp_path: Path) -> None:
        """The k3s and konnectivity tables refuse a negative respawn_delay and a bad port."""
        write_config(
            tmp_path,
            "[k3s]\nrespawn_delay = -5\n[konnectivity]\nagent_port = 70000\nwait_timeout = nan\n",
        )
        app = App(root=NodeRoot(tmp_path), autoload=True)
        result = CliRunner().invoke(cli, ["config", "check"], obj=app)
        assert result.exit_code == ExitCode.CONFIG
        assert f"{CONFIG}:k3s.respawn_delay: -5 is below the minimum 0" in result.stderr
        assert f"{CONFIG}:konnectivity.agent_port: 70000 is above the maximum 65535" in (
            result.stderr
        )
        assert f"{CONFIG}:konnectivity.wait_timeout: nan is not a finite number" in result.stderr

    @pytest.mark.parametrize(
        ("table", "key", "value", "refused"),
        [
            # one path of a record's list of paths (the certificate and the socket directories)
            (
                "konnectivity",
                "cert_dir",
                "certs",
                "MakeDirectories: field 'paths' must be an absolute path",
            ),
            # one of the paths a wait waits for
            (
                "konnectivity",
                "kubeconfig",
                "k3s.yaml",
                "WaitForPaths: field 'paths' must be an absolute path",
            ),
            # a path the plugin derives from the value (the socket's directory)
            (
                "konnectivity",
                "uds_name",
                "run/k.sock",
                "MakeDirectories: field 'paths' must be an absolute path",
            ),
            # a file the plugin reads through its node context
            (
                "konnectivity",
                "first_boot_env",
                "first-boot.env",
                "node paths are absolute, got 'first-boot.env'",
            ),
            ("k3s", "config", "config.yaml", "node paths are absolute, got 'config.yaml'"),
            ("k3s", "agent_env", "agent.env", "node paths are absolute, got 'agent.env'"),
            (
                "k3s",
                "environment_file",
                "default/k3s",
                "node paths are absolute, got 'default/k3s'",
            ),
            # a file looked for only when the service starts (the restore marker)
            ("k3s", "restore_block", "restore", "node paths are absolute, got 'restore'"),
            # the program of the service's command
            (
                "konnectivity",
                "binary",
                "bin/konnectivity-server",
                "Service 'konnectivity-server': field 'command'",
            ),
            (
                "k3s",
                "binary",
                "k3s",
                "Service 'k3s': field 'command' must start with an absolute path",
            ),
            # a file written in the directory the value names
            (
                "k3s",
                "config_dropin_dir",
                "k3s.d",
                "WriteFile: field 'path' must be an absolute path",
            ),
            # a file one plugin contributes to another's service (konnectivity's to k3s): the
            # k3s plugin turned it into a failing step of k3s, and config check said ok
            (
                "konnectivity",
                "egress_config",
                "egress.yaml",
                "ConfigFile: field 'path' must be an absolute path",
            ),
            # a bare file name, whose directory (made before the socket) is "": blamed on the
            # plugin (exit 5, "got ''"), the key never named
            (
                "konnectivity",
                "uds_name",
                "k.sock",
                "MakeDirectories: field 'paths' must be an absolute path",
            ),
        ],
    )
    def test_a_relative_path_a_plugin_refuses_names_its_key(
        self, tmp_path: Path, table: str, key: str, value: str, refused: str
    ) -> None:
        """Relative paths in the shipped plugins' tables were reported as the plugin's own
        definition error (exit 5) or, for a file a hook reads, as its hook raising ValueError
        (exit 3, "fix the plugin"), the key never named: only a record field holding the file's
        value itself was traced back to config.toml."""
        write_config(tmp_path, f'[{table}]\n{key} = "{value}"\n')
        first_boot = tmp_path / "etc/spinifex-eks/first-boot.env"
        first_boot.parent.mkdir(parents=True)
        first_boot.write_text("EKS_KONNECTIVITY_SANS=10.0.0.7\n")  # so that the wait is built
        app = App(root=NodeRoot(tmp_path), autoload=True)
        result = CliRunner().invoke(cli, ["config", "check"], obj=app)
        assert result.exit_code == ExitCode.CONFIG, result.output
        assert (
            f"{CONFIG}:{table}.{key}: {value!r} is refused by the plugin that uses it: {refused}"
        ) in result.stderr
        # The key locates it, not the plugin whose hook happened to be running.
        assert "hook noderole_services" not in result.stderr


class TestNoderolePath:
    """[noderole] noderole_path is the command init files run at boot, from no particular
    directory: relative, it ran nothing (OpenRC) or crashed `render` with a traceback (systemd,
    whose Exec lines take a plain absolute path)."""

    @pytest.mark.parametrize("value", ["noderole", "bin/noderole", "/opt/my tools/noderole"])
    @pytest.mark.parametrize(
        "args",
        [
            ("render", "--backend", "systemd", "server"),
            ("render", "--backend", "openrc", "server"),
            ("enable", "--backend", "systemd", "server"),
            ("enable", "--backend", "openrc", "server"),
            ("config", "check"),
        ],
    )
    def test_a_path_init_files_cannot_run_is_refused_naming_the_key(
        self, tmp_path: Path, value: str, args: tuple[str, ...]
    ) -> None:
        write_config(tmp_path, f'[noderole]\nnoderole_path = "{value}"\n')
        app = App(root=NodeRoot(tmp_path), autoload=True)
        result = CliRunner().invoke(cli, list(args), obj=app)
        assert result.exit_code == ExitCode.CONFIG, result.output
        assert (
            f"{CONFIG}:noderole.noderole_path: {value!r} is not a plain absolute path: "
            "init files run it at boot from no particular directory, and systemd takes no "
            "quotes or spaces in it; set the path of the installed noderole command, e.g. "
            "/usr/local/bin/noderole"
        ) in result.stderr
        assert not (tmp_path / "etc/systemd").exists()
        assert not (tmp_path / "etc/init.d").exists()


class TestTextfileDir:
    @pytest.mark.parametrize("value", ["textfile", "var/lib/node-exporter", "/../../tmp/metrics"])
    def test_config_check_names_a_directory_that_is_not_absolute(
        self, tmp_path: Path, value: str
    ) -> None:
        """Only apply, stop, restart and renew read it: config check said ok, and each of them
        ended in a Python traceback, after the services were started or stopped."""
        write_config(tmp_path, f'[noderole]\ntextfile_dir = "{value}"\n')
        app = App(root=NodeRoot(tmp_path), autoload=True)
        result = CliRunner().invoke(cli, ["config", "check"], obj=app)
        assert result.exit_code == ExitCode.CONFIG, result.output
        assert (
            f"{CONFIG}:noderole.textfile_dir: {value!r} is not an absolute path within the node: "
            "set node_exporter's textfile collector directory"
        ) in result.stderr


def _typo_plugin() -> types.ModuleType:
    module = types.ModuleType("typoplugin")

    def noderole_services() -> list[noderole.Service]:
        return [
            noderole.Service(name="k3s", roles=["server"], command=["/bin/k3s"]),
            noderole.Service(
                name="konnectivity-server",
                roles=["server"],
                after=["k3ss"],
                want=["metrics"],
                command=["/bin/konnectivity-server"],
            ),
        ]

    module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
    return module


def _escaping_plugin() -> types.ModuleType:
    module = types.ModuleType("escaping")

    def noderole_services() -> list[noderole.Service]:
        return [
            noderole.Service(
                name="x", roles=["front"], command=["/bin/x"], pidfile="/../../../tmp/x.pid"
            )
        ]

    module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
    return module


class TestPathsLeavingTheRoot:
    def test_plugin_path_leaving_the_root_is_a_definition_error(self, tmp_path: Path) -> None:
        """A plugin's pidfile = /../../../tmp/x.pid fails plan with exit 5, naming the plugin."""
        app = App(
            root=NodeRoot(tmp_path),
            plugin_objects=(("escaping", _escaping_plugin()),),
            autoload=False,
        )
        result = CliRunner().invoke(cli, ["plan", "front"], obj=app)
        assert result.exit_code == ExitCode.DEFINITION
        assert "escaping" in result.stderr
        assert "Service 'x': field 'pidfile' is '/../../../tmp/x.pid', whose '..' climbs" in (
            result.stderr
        )


def _minting_plugin(ca_cert: str, ca_key: str) -> types.ModuleType:
    module = types.ModuleType("minting")

    def noderole_services() -> list[noderole.Service]:
        mint = noderole.MintCertificate(
            directory="/var/lib/ca3",
            ca_cert=ca_cert,
            ca_key=ca_key,
            common_name="x",
            sans=["a.example"],
        )
        return [noderole.Service(name="x", roles=["front"], command=["/bin/x"], pre_start=[mint])]

    module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
    return module


class TestMintingOverTheCa:
    """A certificate step minting DIR/tls.crt + DIR/tls.key over the CA's own files passed plan
    ("would start") and config check; apply then overwrote the cluster CA with the leaf."""

    @pytest.mark.parametrize(
        ("ca_cert", "ca_key", "field"),
        [
            ("/var/lib/ca3/tls.crt", "/var/lib/ca3/tls.key", "ca_cert"),
            ("/var/lib/ca3/tls.crt", "/var/lib/ca/ca.key", "ca_cert"),
            ("/var/lib/ca/ca.crt", "/var/lib/ca3/tls.key", "ca_key"),
        ],
    )
    def test_a_plugins_step_is_a_definition_error(
        self, tmp_path: Path, ca_cert: str, ca_key: str, field: str
    ) -> None:
        app = App(
            root=NodeRoot(tmp_path),
            plugin_objects=(("minting", _minting_plugin(ca_cert, ca_key)),),
            autoload=False,
        )
        result = CliRunner().invoke(cli, ["plan", "front"], obj=app)
        assert result.exit_code == ExitCode.DEFINITION, result.output
        assert "minting" in result.stderr
        assert f"MintCertificate: field {field!r} is " in result.stderr
        assert "field 'directory' ('/var/lib/ca3')" in result.stderr

    @pytest.mark.parametrize(
        ("text", "key"),
        [
            ('ca_cert = "/var/lib/spinifex-eks/konnectivity/tls.crt"\n', "ca_cert"),
            ('cert_dir = "/etc/k/"\nca_key = "/etc/k/tls.key"\n', "ca_key"),
        ],
    )
    def test_a_ca_path_from_config_toml_names_its_key(
        self, tmp_path: Path, text: str, key: str
    ) -> None:
        """[konnectivity] ca_cert = "<cert_dir>/tls.crt" is the operator's to fix: exit 4."""
        write_config(tmp_path, f"[konnectivity]\n{text}")
        first_boot = tmp_path / "etc/spinifex-eks/first-boot.env"
        first_boot.parent.mkdir(parents=True)
        first_boot.write_text("EKS_KONNECTIVITY_SANS=10.0.0.7\n")  # so that the step is built
        for args in (("config", "check"), ("plan", "server")):
            app = App(root=NodeRoot(tmp_path), autoload=True)
            result = CliRunner().invoke(cli, list(args), obj=app)
            assert result.exit_code == ExitCode.CONFIG, result.output
            assert f"{CONFIG}:konnectivity.{key}: " in result.stderr
            assert f"is refused by the plugin that uses it: MintCertificate: field {key!r}" in (
                result.stderr
            )


class TestPlanWarnings:
    def test_unknown_dependency_name_is_a_warning_with_a_suggestion(self, tmp_path: Path) -> None:
        """`after k3ss` is shown by plan as a warning suggesting k3s; the plan still builds."""
        app = App(
            root=NodeRoot(tmp_path), plugin_objects=(("typo", _typo_plugin()),), autoload=False
        )
        result = CliRunner().invoke(cli, ["plan", "server"], obj=app)
        assert result.exit_code == 0, result.output
        assert (
            "warning: konnectivity-server: after 'k3ss': no service is called or provides "
            "'k3ss' (did you mean 'k3s'?); the after is ignored"
        ) in result.stdout
        assert "warning: konnectivity-server: want 'metrics'" in result.stdout
        as_json = CliRunner().invoke(cli, ["plan", "server", "--json"], obj=app)
        assert len(json.loads(as_json.stdout)["warnings"]) == 2


class TestWait:
    @pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e300", "soon"])
    def test_bad_timeouts_are_usage_errors(self, tmp_path: Path, value: str) -> None:
        """--timeout nan used to wait forever; every non-finite or absurd bound is refused."""
        result = run(tmp_path, "wait", "--path", "/x", "--timeout", value)
        assert result.exit_code == ExitCode.USAGE
        assert "--timeout" in result.stderr
        assert repr(value) in result.stderr

    def test_bound_is_printed_as_given(self, tmp_path: Path) -> None:
        """A 1.5 s timeout is shown as 1.5s in the progress line and the failure."""
        result = run(tmp_path, "wait", "--path", "/etc/x", "--timeout", "1.5", clock=FakeClock())
        assert result.exit_code == ExitCode.FAILED
        assert "noderole wait: waiting for /etc/x (up to 1.5s)" in result.stderr
        assert "still not ready after 1.5s: /etc/x" in result.stderr
        assert "0.99" not in result.stderr
        assert "after 2s" not in result.stderr

    def test_second_condition_shows_the_whole_bound(self, tmp_path: Path) -> None:
        """The bound shown for a later condition is --timeout, not what is left of it."""
        (tmp_path / "etc").mkdir()
        (tmp_path / "etc/x").write_text("")
        result = run(
            tmp_path,
            "wait",
            "--path",
            "/etc/x",
            "--socket",
            "/run/s.sock",
            "--timeout",
            "2.25",
            clock=FakeClock(),
        )
        assert result.exit_code == ExitCode.FAILED
        assert "(up to 2.25s)" in result.stderr

    def test_a_path_leaving_the_root_is_refused(self, tmp_path: Path) -> None:
        """--socket /../x would look outside --root: a usage error."""
        result = run(tmp_path, "wait", "--socket", "/../x.sock", "--timeout", "1")
        assert result.exit_code == ExitCode.USAGE
        assert "climbs above /" in result.stderr


class TestEnvShow:
    def test_missing_file_exits_with_the_env_file_code(self, tmp_path: Path) -> None:
        """A missing file is the documented env-file exit code (8), naming the path."""
        result = run(tmp_path, "env", "show", "/etc/spinifex-eks/first-boot.env")
        assert result.exit_code == ExitCode.ENVFILE
        assert "environment file /etc/spinifex-eks/first-boot.env does not exist" in (result.stderr)

    def test_a_path_leaving_the_root_is_refused(self, tmp_path: Path) -> None:
        """env show /../etc/passwd would read outside --root: a usage error."""
        result = run(tmp_path, "env", "show", "/../etc/passwd")
        assert result.exit_code == ExitCode.USAGE

    def test_present_file_still_shows(self, tmp_path: Path) -> None:
        """The happy path is unchanged."""
        (tmp_path / "etc").mkdir()
        (tmp_path / "etc/a.env").write_text("A=1\n")
        result = run(tmp_path, "env", "show", "/etc/a.env", "--json")
        assert json.loads(result.stdout)["values"] == {"A": "1"}


class TestOtherOptions:
    @pytest.mark.parametrize(
        "args",
        [
            ("apply", "front", "--lock-timeout", "nan"),
            ("status", "--wait", "--timeout", "inf"),
            (
                "cert",
                "mint",
                "--dir",
                "/d",
                "--ca-cert",
                "/c",
                "--ca-key",
                "/k",
                "--cn",
                "x",
                "--sans",
                "a",
                "--renew-before-days",
                "400",
            ),
        ],
    )
    def test_bad_numbers_are_usage_errors(self, tmp_path: Path, args: tuple[str, ...]) -> None:
        """Durations and day counts of other commands refuse nan, inf and out-of-range values."""
        result = run(tmp_path, *args)
        assert result.exit_code == ExitCode.USAGE, result.output


class TestSecondsType:
    def test_seconds_text_is_what_people_write(self) -> None:
        """1.5 stays 1.5, 120.0 prints as 120."""
        assert [seconds_text(x) for x in (1.5, 120.0, 0.25)] == ["1.5", "120", "0.25"]

    def test_zero_allowed_only_when_asked(self) -> None:
        """Seconds(zero=True) takes 0 (a lock timeout of 0 means do not wait)."""
        assert Seconds(zero=True).convert("0", None, None) == 0


class TestDisabledPluginsTable:
    """``--disable-plugin NAME`` is what noderole's own messages advise for a plugin that
    hangs or raises; the operator's config.toml still holds that plugin's table. Before, every
    command then failed with exit 4: "table [node-exporter] is not declared by any installed
    plugin ... install the plugin that reads it" (it is installed)."""

    CONFIG_TEXT = "[noderole]\nnet_check = false\n\n[node-exporter]\nport = 9200\n"

    def _noderole(self, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "noderole", "--root", str(root),
             "--disable-plugin", "node-exporter", *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    def test_the_disabled_plugins_table_is_left_unchecked(self, tmp_path: Path) -> None:
        pytest.importorskip("noderole_node_exporter")
        write_config(tmp_path, self.CONFIG_TEXT)
        check = self._noderole(tmp_path, "config", "check")
        assert check.returncode == 0, check.stderr
        assert check.stdout.startswith(f"ok: {CONFIG} (1 values set, ")
        assert check.stdout.rstrip().endswith(
            "not checked: [node-exporter], whose plugin is disabled)"
        )
        plan = self._noderole(tmp_path, "plan", "server")  # k3s's files are missing here
        assert plan.returncode != ExitCode.CONFIG, plan.stderr
        assert "config.toml" not in plan.stderr
        assert "server: 5 services" in plan.stdout

    def test_two_disabled_plugins_tables_are_both_named(self, tmp_path: Path) -> None:
        """Before: "not checked: [node-exporter], [konnectivity]s whose plugins are ..."."""
        pytest.importorskip("noderole_node_exporter")
        write_config(tmp_path, self.CONFIG_TEXT + "\n[konnectivity]\nagent_port = 8133\n")
        check = self._noderole(tmp_path, "--disable-plugin", "konnectivity", "config", "check")
        assert check.returncode == 0, check.stderr
        assert check.stdout.rstrip().endswith(
            "not checked: [node-exporter] and [konnectivity], whose plugins are disabled)"
        )

    def test_a_table_no_enabled_plugin_declares_still_fails_and_names_the_disabled(
        self, tmp_path: Path
    ) -> None:
        pytest.importorskip("noderole_node_exporter")
        write_config(tmp_path, self.CONFIG_TEXT + "\n[k3z]\nlog = 1\n")
        check = self._noderole(tmp_path, "config", "check")
        assert check.returncode == 4
        assert (
            f"noderole: error: {CONFIG}:k3z: table [k3z] is not declared by any enabled plugin "
            "(did you mean "
            "'k3s'?) (known tables: [k3s], [konnectivity], [noderole]; disabled: "
            "node-exporter); remove it or install the plugin that reads it"
        ) in check.stderr.splitlines()
