"""Start-up guard, in the manner of click's tests/test_imports.py.

`noderole --help` runs at boot: it must not import cryptography's x509 module (~80 ms) or any
plugin. The check runs in a fresh interpreter so nothing this test process imported hides a
regression.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.modules_probe import run_and_list_modules, run_snippet

FORBIDDEN_PREFIXES = (
    "cryptography",
    "noderole_k3s",
    "noderole_konnectivity",
    "noderole.builtin",
    "noderole.certs",
    "noderole.plugins",
    "noderole.records",
    "pluggy",
    "attr",
    "importlib.metadata",
    "shutil",
)


def _modules_after_help() -> list[str]:
    return run_and_list_modules(["--help"])[1]


class TestHelpImports:
    def test_help_imports_no_plugin_and_no_x509(self) -> None:
        """`noderole --help` imports no cryptography, no plugin and no plugin machinery, nor
        shutil (and its compression modules) to size the terminal."""
        loaded = _modules_after_help()
        offenders = [m for m in loaded if m.startswith(FORBIDDEN_PREFIXES)]
        assert offenders == []

    def test_help_output_lists_commands(self) -> None:
        """The same run still prints the full command list."""
        done = subprocess.run(
            [sys.executable, "-m", "noderole", "--help"], capture_output=True, text=True, check=True
        )
        for command in ("plan", "graph", "list", "config"):
            assert f"  {command}" in done.stdout


class TestPublicApi:
    def test_every_public_name_resolves(self) -> None:
        """Every name in noderole.__all__ imports lazily and the lazy table matches __all__."""
        import noderole

        assert set(noderole.__all__) == {"__version__", *noderole._public()}
        kit_types = {"Step", "Wait", "EnvFile", "Plan", "PlannedService", "ApplyReport"}
        assert kit_types | {"ServiceReport", "CertOutcome", "FakeClock", "CONFIG_PATH"} <= set(
            noderole.__all__
        )
        for name in noderole.__all__:
            assert getattr(noderole, name) is not None


class TestRehearsalRecords:
    def test_public_names_are_the_moved_classes(self) -> None:
        """The rehearsal's records live in their own module; ``noderole.X`` names them."""
        import noderole
        import noderole.rehearsal_records

        for name in ("StandIn", "RehearsalFile", "RehearsalSetting", "FreePort"):
            assert getattr(noderole, name) is getattr(noderole.rehearsal_records, name)
        assert "StandIn" not in vars(__import__("noderole.records").records)


class TestRootEnvName:
    def test_cli_repeats_the_root_variable_name_correctly(self) -> None:
        """The CLI's copy of NODEROLE_ROOT (kept to avoid an import at --help) matches root.py."""
        import noderole.cli
        import noderole.root

        assert noderole.cli.ROOT_ENV == noderole.root.ROOT_ENV


PLAN_FORBIDDEN = (
    "attr",
    "pathlib",
    "noderole.engine",
    "noderole.steps",
    "noderole.state",
    "noderole.manifest",
    "noderole.backends.native",
    "noderole.supervisor._client",
    "noderole.supervisor._protocol",
    "noderole.supervisor._spec",
    "noderole.supervisor._state",
    "noderole.supervisor._status",
    "cryptography",
    "yaml",
    "difflib",
    "noderole.rehearsal_records",
    "signal",
    "locale",
)
"""What ``plan`` must not import: attrs (noderole.recordclass builds the records), pathlib (with
urllib.parse, 6% of `import click`: the node is read through string paths, and the shipped
plugins use `node.exists` and `node.read_text`); and, as it starts nothing, no engine, no
applied state and no supervisor client (it shows only the backend's name; the supervisor package
lends it only its JSON text, which reads the caches of entry points and config.toml); the k3s
plugin reads a flat config.yaml and writes its drop-ins and manifests without PyYAML; its
``after: firewall`` (a service of no shipped role) is warned about without difflib, since
nothing is close to it; and the rehearsal's records (stand-ins, input files) are not built; a
SIGTERM stop signal is checked without the signal module; no gettext lookup imports locale (the
help option is noderole's)."""


def _modules_after_plan(root: Path, role: str) -> list[str]:
    """The modules of a second ``plan`` on the node: the first one found the installed plugins
    with importlib.metadata (which imports pathlib) and cached them, as a node's first command
    does once."""
    argv = ["--root", str(root), "plan", role]
    run_and_list_modules(argv, exit_codes=(None, 0, 12))
    return run_and_list_modules(argv, exit_codes=(None, 0, 12))[1]


class TestPlanImports:
    def test_plan_server_imports_no_engine_state_or_supervisor(self, tmp_path: Path) -> None:
        """`noderole plan server` (the shipped plugins) imports no engine, state, supervisor or
        PyYAML."""
        config = tmp_path / "etc/rancher/k3s/config.yaml"
        config.parent.mkdir(parents=True)
        config.write_text("write-kubeconfig-mode: '0600'\ntls-san:\n- node.example\n")
        loaded = _modules_after_plan(tmp_path, "server")
        assert "noderole_k3s" in loaded  # the probe really planned from the plugins
        offenders = [m for m in loaded if m.startswith(PLAN_FORBIDDEN)]
        assert offenders == []


class TestRepeatedConstants:
    def test_the_probes_import_sockets_and_processes_only_to_probe(self) -> None:
        """An apply turns readiness checks into probes for the supervisor's spec and runs none:
        building them imports neither socket, subprocess nor signal (the probe that connects or
        runs a command imports what it uses)."""
        probe = (
            "import sys\n"
            "from noderole.supervisor import probes\n"
            "probes.TcpProbe(host='127.0.0.1', port=1)\n"
            "probes.CommandProbe(argv=('/bin/true',))\n"
            "print(sorted({'socket', 'subprocess', 'signal'} & set(sys.modules)))\n"
            "probes.attempt(probes.TcpProbe(host='127.0.0.1', port=1), left=0.5)\n"
            "print(sorted({'socket'} & set(sys.modules)))\n"
        )
        assert run_snippet(probe) == ["[]", "['socket']"]

    def test_a_spec_naming_a_common_stop_signal_imports_no_signal_module(self) -> None:
        """A boot's apply builds a spec per service; one naming SIGTERM (or TERM) is checked
        without the signal module's enums; an uncommon name still is, and a wrong one refused."""
        probe = (
            "import sys\n"
            "from noderole.supervisor._spec import SupervisionSpec\n"
            "SupervisionSpec(stop_signal='SIGTERM'); SupervisionSpec(stop_signal='TERM')\n"
            "print('signal' in sys.modules)\n"
            "print(SupervisionSpec(stop_signal='WINCH').stop_signum)\n"
            "try:\n"
            "    SupervisionSpec(stop_signal='SIGNOPE')\n"
            "except ValueError as e:\n"
            "    print(e)\n"
        )
        assert run_snippet(probe) == [
            "False",
            str(int(signal.SIGWINCH)),
            "supervision.stop_signal must name a signal, got 'SIGNOPE'",
        ]

    def test_the_spec_repeats_the_records_common_signals(self) -> None:
        """The supervisor's copy of the common stop signals (it imports nothing of noderole's)
        matches the records' one, and each is a real signal."""
        from noderole import records
        from noderole.supervisor import _spec

        assert _spec._COMMON_SIGNALS == records._COMMON_SIGNALS
        assert all(
            isinstance(getattr(signal, name), signal.Signals) for name in records._COMMON_SIGNALS
        )

    def test_waits_repeats_the_probes_attempt_timeout(self) -> None:
        """waits' copy of ATTEMPT_TIMEOUT (kept so an apply need not import the probes) matches."""
        from noderole import waits
        from noderole.supervisor import probes

        assert waits.ATTEMPT_TIMEOUT == probes.ATTEMPT_TIMEOUT


class TestTerminalColumns:
    @pytest.mark.parametrize("columns", ["", "0", "-3", "abc", "120", "37"])
    def test_same_columns_as_shutil(self, monkeypatch: pytest.MonkeyPatch, columns: str) -> None:
        """The help's terminal width is shutil.get_terminal_size()'s, COLUMNS set or not."""
        import shutil

        from noderole.cli import terminal_columns

        if columns:
            monkeypatch.setenv("COLUMNS", columns)
        else:
            monkeypatch.delenv("COLUMNS", raising=False)
        assert terminal_columns() == shutil.get_terminal_size().columns

    def test_help_wraps_at_the_terminal_width(self) -> None:
        """`noderole --help` wraps to COLUMNS, as click's own formatter does (at most 100)."""
        env = {**os.environ, "COLUMNS": "60"}
        narrow = subprocess.run(
            [sys.executable, "-m", "noderole", "--help"], capture_output=True, text=True, env=env
        )
        env["COLUMNS"] = "300"
        wide = subprocess.run(
            [sys.executable, "-m", "noderole", "--help"], capture_output=True, text=True, env=env
        )
        assert max(len(line) for line in narrow.stdout.splitlines()) <= 58
        assert 80 < max(len(line) for line in wide.stdout.splitlines()) <= 100


class TestScriptDirectory:
    """The console script's own directory is not on the import path once noderole runs."""

    def _script_with(self, tmp_path: Path, planted: str) -> Path:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        script = bin_dir / "noderole"
        script.write_text(
            "import sys\nfrom noderole._start import run\nif __name__ == '__main__':\n"
            "    sys.exit(run())\n"
        )
        (bin_dir / planted).write_text(
            "raise SystemExit('planted module imported from the script directory')\n"
        )
        return script

    @pytest.mark.parametrize("planted", ["click.py", "json.py"])
    def test_a_module_planted_beside_the_script_is_not_imported(
        self, tmp_path: Path, planted: str
    ) -> None:
        """A `click.py` or `json.py` next to the installed `noderole` script would otherwise be
        imported (by root, at boot) in place of the real one."""
        script = self._script_with(tmp_path, planted)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
        done = subprocess.run(
            [sys.executable, str(script), "--root", str(tmp_path), "plan", "--help"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert "planted" not in done.stderr
        assert done.returncode == 0, done.stderr

    def test_other_entries_are_kept(self) -> None:
        """Without a script (`python -c`: sys.path[0] is the working directory) nothing is
        dropped."""
        probe = (
            "import sys\n"
            "before = list(sys.path)\n"
            "from noderole._start import drop_script_directory\n"
            "drop_script_directory()\n"
            "print(sys.path == before)\n"
        )
        assert run_snippet(probe) == ["True"]
