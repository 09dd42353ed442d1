"""Plugins that misbehave at import or in ``noderole_services`` (docs/fault-matrix.md).

Real plugin distributions (a ``.dist-info`` with entry points, on ``PYTHONPATH``) and the real
``noderole`` command as an OS process, against the native supervisor under a scratch root: the
``node`` fixture ends every process started for the root, and ``spawned`` every CLI process,
by pid, even when a test fails.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import noderole
from noderole.errors import ExitCode
from tests.test_engine import Node, node, wait_until
from tests.test_fault_matrix import Spawned, spawned

__all__ = ["node", "spawned"]  # the fixtures, imported for pytest

GOOD = """
import noderole

def service(name, **fields):
    return noderole.Service(
        name=name,
        roles=fields.pop("roles", ["demo"]),
        command=["/usr/local/bin/sleeper", name],
        pidfile=f"/run/{name}.pid",
        output_log=f"/var/log/{name}.log",
        supervision=noderole.Supervision(respawn_delay=0.05, stop_timeout=2),
        **fields,
    )

@noderole.hookimpl
def noderole_services(node):
    # b needs c, which only the broken plugin would define; d merely wants it.
    demo = [service("a"), service("b", need=["c"]), service("d", want=["c"], after=["a"])]
    return [*demo, service("e", roles=["solo"]), service("f", roles=["solo"], after=["e"])]
"""

IMPORT_FAULTS = {
    "hang": "import time\ntime.sleep(3600)\n",
    "exit": "raise SystemExit(0)\n",
    "interrupt": "raise KeyboardInterrupt\n",
}
IMPORT_MESSAGES = {
    "hang": "did not finish importing within 0.5s",
    "exit": "failed to import: SystemExit: 0",
    "interrupt": "failed to import: KeyboardInterrupt",
}
HOOK_FAULTS = {
    "raise": "    raise RuntimeError('disk on fire')\n",
    "exit": "    raise SystemExit(0)\n",
    "hang": "    import time\n    time.sleep(3600)\n",
}
HOOK_LAST_LINES = {
    "raise": "RuntimeError: disk on fire",
    "exit": "SystemExit: 0",
    "hang": "TimeoutError: hook noderole_services did not return within 0.5s",
}


class Scene:
    """A node root, the distributions installed for it, and the CLI run as a process."""

    def __init__(
        self, node: Node, spawned: Spawned, install: Callable[..., Path], site: Path
    ) -> None:
        self.node = node
        self.spawned = spawned
        self.install = install
        self.env = {**os.environ, "PYTHONPATH": str(site), "NODEROLE_HOOK_TIMEOUT": "0.5"}
        self.env.pop("NODEROLE_DISABLE_PLUGIN_AUTOLOAD", None)
        # Only the plugins a test installs: the shipped ones are disabled before import.
        shipped = {ep.name for ep in importlib.metadata.entry_points(group="noderole")}
        self.disable = [a for name in sorted(shipped) for a in ("--disable-plugin", name)]
        self.marker = node.root / "run/broken-imported"

    def broken_import(self, fault: str) -> None:
        """Install plugin 'fmbroken', which leaves a marker, then fails at import."""
        self.marker.parent.mkdir(parents=True, exist_ok=True)
        source = f"open({str(self.marker)!r}, 'w').close()\n" + IMPORT_FAULTS[fault]
        self.install("fm-broken", "1.0", {"fmbroken": "fm_broken"}, {"fm_broken": source})

    def broken_hook(self, fault: str) -> None:
        """Install plugin 'fmbad', whose noderole_services fails."""
        source = "import noderole\n\n@noderole.hookimpl\ndef noderole_services(node):\n"
        self.install("fm-bad", "1.0", {"fmbad": "fm_bad"}, {"fm_bad": source + HOOK_FAULTS[fault]})

    def good(self) -> None:
        self.install("fm-good", "1.0", {"fmgood": "fm_good"}, {"fm_good": GOOD})

    def cli(self, *args: str) -> tuple[int, str, str]:
        done = self.spawned.run(["--root", str(self.node.root), *self.disable, *args], env=self.env)
        return done.returncode, done.stdout, " ".join(done.stderr.split())


@pytest.fixture
def scene(node: Node, spawned: Spawned, install_dist: Callable[..., Path], tmp_path: Path) -> Scene:
    return Scene(node, spawned, install_dist, tmp_path / "site")


def running(node: Node, name: str) -> bool:
    path = node.root / f"run/{name}.pid"
    if not path.exists():
        return False
    try:
        os.kill(int(path.read_text()), 0)
    except (ProcessLookupError, ValueError):
        return False
    return True


class TestImport:
    @pytest.mark.parametrize("fault", sorted(IMPORT_FAULTS))
    def test_a_plugin_failing_at_import_is_a_plugin_error(self, scene: Scene, fault: str) -> None:
        """Hang, SystemExit(0) or KeyboardInterrupt at import: exit 3 naming the plugin, nothing
        started (never an exit 0 with nothing started, never a hang)."""
        scene.good()
        scene.broken_import(fault)
        code, out, err = scene.cli("apply", "demo")
        assert code == ExitCode.PLUGIN, (out, err)
        assert err.startswith("noderole: error: plugin 'fmbroken'")
        assert "from distribution 'fm-broken' 1.0" in err
        assert IMPORT_MESSAGES[fault] in err
        assert "--disable-plugin fmbroken" in err
        assert "Traceback" not in err
        assert scene.marker.exists()  # it was imported, and failed there
        assert scene.node.processes() == []

    @pytest.mark.parametrize("fault", ["hang", "exit"])
    def test_status_and_stop_import_no_plugin(self, scene: Scene, fault: str) -> None:
        """After an apply, a plugin that hangs or exits at import: status and stop still work,
        from the recorded plan, and never import it."""
        scene.good()
        code, out, err = scene.cli("apply", "solo")
        assert code == 0, (out, err)
        scene.broken_import(fault)
        code, out, err = scene.cli("status", "--json")
        assert code == 0, (out, err)
        rows = {row["name"]: row["state"] for row in json.loads(out)["services"]}
        assert rows == {"e": "running", "f": "running"}
        code, out, err = scene.cli("stop", "f")
        assert (code, out) == (0, " * Stopped f\n"), err
        code, out, err = scene.cli("stop")
        assert code == 0, (out, err)
        assert " * Stopped e" in out
        assert not scene.marker.exists()
        assert not running(scene.node, "e")
        assert not running(scene.node, "f")
        # Planning does need the plugins: the broken one is then imported, and reported.
        code, out, err = scene.cli("plan", "solo")
        assert code == ExitCode.PLUGIN, (out, err)
        assert scene.marker.exists()


class TestServicesHookAtApply:
    @pytest.mark.parametrize("fault", sorted(HOOK_FAULTS))
    def test_a_broken_plugin_fails_its_own_and_the_rest_starts(
        self, scene: Scene, fault: str
    ) -> None:
        """noderole_services raising, exiting or hanging: the plugin and what needs it fail,
        named with the last line of the traceback; the others start; the exit status is 1."""
        scene.good()
        scene.broken_hook(fault)
        code, out, err = scene.cli("apply", "demo", "--json")
        assert code == ExitCode.FAILED, (out, err)
        report: dict[str, Any] = {s["name"]: s for s in json.loads(out)["services"]}
        assert report["plugin:fmbad"]["status"] == "failed"
        reason = report["plugin:fmbad"]["reason"]
        assert f"plugin 'fmbad' failed to define its services ({HOOK_LAST_LINES[fault]}" in reason
        assert "--disable-plugin fmbad" in reason
        assert report["b"]["status"] == "failed"
        assert (
            "not applied: it needs c, which no loaded plugin defines now" in report["b"]["reason"]
        )
        assert HOOK_LAST_LINES[fault] in report["b"]["reason"]
        assert (report["a"]["status"], report["d"]["status"]) == ("started", "started")
        wait_until(lambda: running(scene.node, "a") and running(scene.node, "d"), "a and d")
        assert not running(scene.node, "b")

    def test_a_value_of_config_toml_it_cannot_use_names_the_key_to_fix(self, scene: Scene) -> None:
        """A configuration error raised in the hook (a value of config.toml the plugin's
        records refuse) is the operator's to fix, not the plugin's: the report is the error,
        which names the key and says what to fix. Before: "failed to define its services
        (DefinitionError: ...)" without the key, or the plugin's name prefixed to it, and
        "Fix the plugin, or disable it"."""
        scene.good()
        message = "/etc/noderole/config.toml:fm.port: 0 is below the minimum 1"
        source = (
            "import noderole\n\n@noderole.hookimpl\ndef noderole_services(node):\n"
            f"    raise noderole.ConfigError({message!r})\n"
        )
        scene.install("fm-bad", "1.0", {"fmbad": "fm_bad"}, {"fm_bad": source})
        code, out, err = scene.cli("apply", "demo", "--json")
        assert code == ExitCode.FAILED, (out, err)
        report: dict[str, Any] = {s["name"]: s for s in json.loads(out)["services"]}
        assert report["plugin:fmbad"]["reason"] == (
            f"plugin 'fmbad' could not define its services: {message}; its services are not "
            "started. `noderole config check` lists every problem of the file"
        )
        assert (report["a"]["status"], report["d"]["status"]) == ("started", "started")
        code, out, err = scene.cli("config", "check")
        assert (code, err) == (
            ExitCode.CONFIG,
            f"noderole: error: {message} config check: 1 problem found",
        )

    def test_what_an_earlier_apply_started_runs_on_and_stop_stops_it(self, scene: Scene) -> None:
        """The plugin worked at the last apply and breaks now: its service c and b (which needs
        it) are left running as they were, and `stop` (from the record) still stops them."""
        scene.good()
        source = (
            "import noderole\n\n@noderole.hookimpl\ndef noderole_services(node):\n"
            "    if node.resolve('/etc/fm/broken').exists():\n"
            "        raise RuntimeError('disk on fire')\n"
            "    return noderole.Service(name='c', roles=['demo'], pidfile='/run/c.pid',\n"
            "        command=['/usr/local/bin/sleeper', 'c'], output_log='/var/log/c.log',\n"
            "        supervision=noderole.Supervision(respawn_delay=0.05, stop_timeout=2))\n"
        )
        scene.install("fm-switch", "1.0", {"fmbad": "fm_switch"}, {"fm_switch": source})
        code, out, err = scene.cli("apply", "demo", "--json")
        assert code == 0, (out, err)
        pids = {s["name"]: s["pid"] for s in json.loads(out)["services"]}
        (scene.node.root / "etc/fm").mkdir(parents=True)
        (scene.node.root / "etc/fm/broken").touch()
        code, out, err = scene.cli("apply", "demo", "--json")
        assert code == ExitCode.FAILED, (out, err)
        report = {s["name"]: s for s in json.loads(out)["services"]}
        assert report["plugin:fmbad"]["status"] == "failed"
        assert report["b"]["status"] == "failed"
        assert (report["a"]["status"], report["d"]["status"]) == ("running", "running")
        assert "c" not in report
        for name in "bc":
            assert running(scene.node, name)
            assert int((scene.node.root / f"run/{name}.pid").read_text()) == pids[name]
        code, out, err = scene.cli("stop")
        assert code == 0, (out, err)
        assert {" * Stopped b", " * Stopped c"} <= set(out.splitlines())
        assert not any(running(scene.node, name) for name in "abcd")

    def test_the_text_report_names_the_plugin(self, scene: Scene) -> None:
        """Without --json, the failed plugin is listed with its reason on stderr."""
        scene.good()
        scene.broken_hook("raise")
        code, out, err = scene.cli("apply", "demo")
        assert code == ExitCode.FAILED, (out, err)
        assert "plugin:fmbad: plugin 'fmbad' failed to define its services" in err
        assert "RuntimeError: disk on fire" in err

    def test_plan_stays_strict(self, scene: Scene) -> None:
        """`plan` reports the broken plugin as the error it is (exit 3), as before."""
        scene.good()
        scene.broken_hook("exit")
        code, out, err = scene.cli("plan", "demo")
        assert code == ExitCode.PLUGIN, (out, err)
        assert "hook noderole_services raised SystemExit: 0" in err

    def test_a_role_only_the_broken_plugin_defines_is_its_error(self, scene: Scene) -> None:
        """Nothing of the role is left: the plugin's error (exit 3), not "unknown role"."""
        scene.good()
        scene.broken_hook("raise")
        code, out, err = scene.cli("apply", "elsewhere")
        assert code == ExitCode.PLUGIN, (out, err)
        assert "plugin 'fmbad'" in err
        assert "disk on fire" in err
        assert scene.node.processes() == []


class TestAPluginsUmask:
    def test_a_hook_that_clears_the_umask_makes_nothing_world_writable(
        self, tmp_path: Path
    ) -> None:
        """noderole widens its caller's umask to 022 before anything loads; a plugin that sets
        umask 000 (at import, in a hook) undid it for the rest of the run, and every directory
        made on the way (`mkdir -p` of a step, k3s's manifests directory) was world-writable."""
        from click.testing import CliRunner

        from noderole.cli import cli
        from noderole.cli._app import App
        from noderole.root import NodeRoot

        class Careless:
            @noderole.hookimpl
            def noderole_services(self, node: noderole.NodeContext) -> noderole.Service:
                os.umask(0)
                return noderole.Service(
                    name="m",
                    roles=["r"],
                    pre_start=[noderole.MakeDirectories(paths=["/var/lib/m/a/b"])],
                )

        saved = os.umask(0o022)
        try:
            app = App(root=NodeRoot(tmp_path), plugin_objects=(("careless", Careless()),))
            done = CliRunner().invoke(cli, ["apply", "r"], obj=app, catch_exceptions=False)
            assert done.exit_code == 0, done.output
            for made in ("var/lib/m", "var/lib/m/a", "var/lib/m/a/b"):
                mode = (tmp_path / made).stat().st_mode & 0o777
                assert not mode & 0o022, f"{made} is {mode:04o}"
        finally:
            os.umask(saved)


class TestAPluginThatPrints:
    @pytest.mark.parametrize("args", [["plan", "r", "--json"], ["apply", "r", "--json"]])
    def test_its_output_goes_to_stderr_not_into_json(self, tmp_path: Path, args: list[str]) -> None:
        """stdout is noderole's: a plugin's print (at import, in a hook, in a step) went into
        the JSON document of `plan --json` or `apply --json`, which no reader could parse.
        What plugin code prints goes to stderr."""
        from click.testing import CliRunner

        from noderole.cli import cli
        from noderole.cli._app import App
        from noderole.root import NodeRoot

        def chatty_step(ctx: noderole.StepContext) -> None:
            print("hello from a step")

        class Chatty:
            @noderole.hookimpl
            def noderole_services(self, node: noderole.NodeContext) -> noderole.Service:
                print("hello from a hook")
                return noderole.Service(
                    name="m",
                    roles=["r"],
                    pre_start=[noderole.Call(function=chatty_step, description="chat")],
                )

        app = App(root=NodeRoot(tmp_path), plugin_objects=(("chatty", Chatty()),))
        done = CliRunner().invoke(cli, args, obj=app, catch_exceptions=False)
        assert done.exit_code == 0, done.output
        json.loads(done.stdout)  # one document, nothing else
        assert "hello from a hook" in done.stderr

    def test_what_a_step_reports_through_noderole_stays_on_stdout(self, tmp_path: Path) -> None:
        """The redirection is of what plugin code prints, not of noderole's own progress lines
        a step reports through ``ctx.progress`` from the same thread."""
        from click.testing import CliRunner

        from noderole.cli import cli
        from noderole.cli._app import App
        from noderole.root import NodeRoot

        def reporting_step(ctx: noderole.StepContext) -> None:
            ctx.progress("checking the widget")

        class Reporting:
            @noderole.hookimpl
            def noderole_services(self, node: noderole.NodeContext) -> noderole.Service:
                return noderole.Service(
                    name="m",
                    roles=["r"],
                    pre_start=[noderole.Call(function=reporting_step, description="check")],
                )

        app = App(root=NodeRoot(tmp_path), plugin_objects=(("reporting", Reporting()),))
        done = CliRunner().invoke(cli, ["apply", "r"], obj=app, catch_exceptions=False)
        assert done.exit_code == 0, done.output
        assert "m: checking the widget" in done.stdout, (done.stdout, done.stderr)
