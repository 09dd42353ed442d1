"""Mistakes a plugin's author makes that used to pass without a word (docs/fault-matrix.md).

Real distributions (a ``.dist-info`` with entry points on ``sys.path``, from ``install_dist``)
and the ``noderole`` command in process, under a scratch root: each mistake is either refused,
naming the plugin and the fix, or warned about on stderr, once.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from noderole.cli import cli
from noderole.cli._app import App
from noderole.entrypoints import discover
from noderole.errors import ExitCode, PluginError
from noderole.plugins import load_plugins
from noderole.root import NodeRoot

SERVICE = """
import noderole

@noderole.hookimpl
def noderole_services(node):
    return noderole.Service(name="{name}", roles=["demo"], command=["/usr/bin/{name}"])
"""


def _cli(tmp_path: Path, *args: str) -> Result:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    app = App(root=NodeRoot(root), autoload=True)
    return CliRunner().invoke(cli, list(args), obj=app)


def _one_line(text: str) -> str:
    return " ".join(text.split())


class TestOneNameTwoDistributions:
    def _two(self, install_dist: Callable[..., Path]) -> tuple[Path, Path]:
        first = install_dist(
            "tk-one", "1.0", {"timekeeper": "tk_one"}, {"tk_one": SERVICE.format(name="chrony")}
        )
        second = install_dist(
            "tk-two", "2.0", {"timekeeper": "tk_two"}, {"tk_two": SERVICE.format(name="ntpd")}
        )
        return first, second

    @pytest.mark.parametrize("command", [["list"], ["plan", "demo"]])
    def test_two_distributions_declaring_one_name_are_refused(
        self, tmp_path: Path, install_dist: Callable[..., Path], command: list[str]
    ) -> None:
        """Both distributions, their versions and paths are named, with the fix; before, one of
        them was dropped in silence and the command exited 0."""
        first, second = self._two(install_dist)
        result = _cli(tmp_path, *command)
        assert result.exit_code == ExitCode.PLUGIN, result.output
        message = _one_line(result.output)
        assert "plugin name 'timekeeper' is declared by 2 distributions" in message
        assert f"'timekeeper = tk_one' of distribution 'tk-one' 1.0 at {first}" in message
        assert f"'timekeeper = tk_two' of distribution 'tk-two' 2.0 at {second}" in message
        assert "Uninstall one of them" in message
        assert "rename the entry point" in message
        assert "Traceback" not in result.output

    def test_disabling_the_name_skips_both(
        self, tmp_path: Path, install_dist: Callable[..., Path]
    ) -> None:
        """--disable-plugin NAME skips every distribution of that name, never one at random."""
        self._two(install_dist)
        result = _cli(tmp_path, "--disable-plugin", "timekeeper", "list")
        assert result.exit_code == 0, result.output
        assert "timekeeper" not in result.output
        assert "chrony" not in result.output
        assert "ntpd" not in result.output

    def test_the_cache_keeps_both(self, tmp_path: Path, install_dist: Callable[..., Path]) -> None:
        """The entry-point cache serves both entries: the refusal does not depend on it."""
        self._two(install_dist)
        cache = tmp_path / "cache.json"
        for _ in range(2):
            found = [(f.name, f.distribution) for f in discover("noderole", cache)]
            assert ("timekeeper", "tk-one") in found
            assert ("timekeeper", "tk-two") in found
            with pytest.raises(PluginError, match="declared by 2 distributions"):
                load_plugins(entry_point_cache=cache)

    def test_one_distribution_found_twice_on_the_path_is_no_error(
        self, tmp_path: Path, install_dist: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The same distribution reachable from two path entries (an editable install beside a
        .pth) is one plugin, loaded once."""
        info = install_dist(
            "tk-one", "1.0", {"timekeeper": "tk_one"}, {"tk_one": SERVICE.format(name="chrony")}
        )
        again = tmp_path / "again"
        again.mkdir()
        shutil.copytree(info, again / info.name)
        monkeypatch.syspath_prepend(str(again))
        assert [f.name for f in discover("noderole", None)].count("timekeeper") == 1
        result = _cli(tmp_path, "list")
        assert result.exit_code == 0, result.output
        assert "timekeeper  (tk-one 1.0)" in result.output


UNMARKED = """
def noderole_services(node):
    return []
"""
FUNCTION = """
import noderole

@noderole.hookimpl
def noderole_services(node):
    return []
"""
FOREIGN = """
import pluggy

hookimpl = pluggy.HookimplMarker("timekeeper")

@hookimpl
def noderole_services(node):
    return []
"""


class TestAPluginThatImplementsNothing:
    @pytest.mark.parametrize(
        ("source", "target", "hint"),
        [
            (
                UNMARKED,
                "tk_mod",
                "noderole_services is not marked as a hook implementation: mark the",
            ),
            (FUNCTION, "tk_mod:noderole_services", "names the function 'noderole_services'"),
            (FOREIGN, "tk_mod", "marked with the hookimpl marker of project 'timekeeper'"),
        ],
        ids=["unmarked", "function", "foreign-marker"],
    )
    @pytest.mark.parametrize(
        "command",
        [["list"], ["plan", "agent"], ["plan", "demo"], ["apply", "--dry-run", "agent"]],
        ids=["list", "plan", "plan-failing", "apply-dry-run"],
    )
    def test_it_is_warned_about_once(
        self,
        tmp_path: Path,
        install_dist: Callable[..., Path],
        source: str,
        target: str,
        hint: str,
        command: list[str],
    ) -> None:
        """A warning on stderr names the plugin, its entry point and the likely fix; the plugin
        still loads (it is not an error). Before, `list` showed it with no services, silently."""
        install_dist("tk-mod", "1.0", {"timekeeper": target}, {"tk_mod": source})
        result = _cli(tmp_path, *command)
        # `plan demo` fails (no plugin defines the role): the warning comes first all the same;
        # the shipped plugins' services of role agent would wait for their binaries (exit 12).
        assert result.exit_code in (0, ExitCode.PLAN, ExitCode.WOULD_FAIL), result.output
        lines = [line for line in result.output.splitlines() if "implements no hook" in line]
        assert len(lines) == 1, result.output
        line = lines[0]
        assert line.startswith("noderole: warning: plugin 'timekeeper' (entry point ")
        assert f"'timekeeper = {target}' from distribution 'tk-mod' 1.0)" in line
        assert hint in line

    def test_a_plugin_with_hooks_is_not_warned_about(
        self, tmp_path: Path, install_dist: Callable[..., Path]
    ) -> None:
        install_dist("tk-mod", "1.0", {"timekeeper": "tk_mod"}, {"tk_mod": FUNCTION})
        result = _cli(tmp_path, "list")
        assert result.exit_code == 0, result.output
        assert "warning" not in result.output

    def test_the_testing_kit_shows_the_warning(self) -> None:
        """A plugin's own test can assert that its plugin loads without a warning."""
        from noderole.testing import load_test_plugins

        (warning,) = load_test_plugins(("unmarked", _module("tk_unmarked", UNMARKED))).warnings
        assert warning.startswith("plugin 'unmarked' implements no hook")


class TestAnOptionalHookOfNoKnownName:
    def test_a_misspelled_k3s_hook_is_warned_about_with_the_right_name(self) -> None:
        """With the k3s plugin loaded, `noderole_k3s_confg` (optional) names no hook: a warning
        suggests noderole_k3s_config. Before, it was ignored in silence."""
        import noderole_k3s.plugin as k3s

        module = _module(
            "tk_typo",
            """
            import noderole

            @noderole.hookimpl(optionalhook=True)
            def noderole_k3s_confg(node):
                return []
            """,
        )
        plugins = load_plugins(plugins=[("k3s", k3s), ("typo", module)], autoload=False)
        (warning,) = plugins.warnings
        assert warning.startswith("plugin 'typo' implements noderole_k3s_confg")
        assert "(function 'noderole_k3s_confg')" in warning
        assert "did you mean 'noderole_k3s_config'?" in warning

    def test_without_the_owning_plugin_there_is_no_warning(self) -> None:
        """No loaded plugin adds noderole_k3s_* hooks (konnectivity installed without k3s):
        that is what optionalhook is for, and a warning at every run would only be noise."""
        import noderole_konnectivity.plugin as konnectivity

        plugins = load_plugins(plugins=[("konnectivity", konnectivity)], autoload=False)
        assert plugins.warnings == []

    def test_the_owner_disabled_on_purpose_is_no_warning(self) -> None:
        """konnectivity with --disable-plugin k3s: its k3s hooks are what optionalhook is for."""
        import noderole_k3s.plugin as k3s
        import noderole_konnectivity.plugin as konnectivity

        plugins = load_plugins(
            plugins=[("k3s", k3s), ("konnectivity", konnectivity)],
            autoload=False,
            disabled=["k3s"],
        )
        assert plugins.warnings == []

    def test_a_misspelled_optional_core_hook_is_warned_about(self) -> None:
        module = _module(
            "tk_core",
            """
            import noderole

            @noderole.hookimpl(optionalhook=True)
            def noderole_servics(node):
                return []
            """,
        )
        (warning,) = load_plugins(plugins=[("typo", module)], autoload=False).warnings
        assert "did you mean 'noderole_services'?" in warning

    def test_the_shipped_plugins_load_without_a_warning(self) -> None:
        import noderole_k3s.plugin as k3s
        import noderole_konnectivity.plugin as konnectivity

        plugins = load_plugins(
            plugins=[("k3s", k3s), ("konnectivity", konnectivity)], autoload=False
        )
        assert plugins.warnings == []


class TestMisspelledHooksAndArguments:
    def test_a_misspelled_hook_suggests_the_right_one(self) -> None:
        module = _module(
            "tk_service",
            """
            import noderole

            @noderole.hookimpl
            def noderole_service(node):
                return []
            """,
        )
        with pytest.raises(PluginError) as caught:
            load_plugins(plugins=[("typo", module)], autoload=False)
        assert "implements a hook that does not exist" in str(caught.value)
        assert "(did you mean 'noderole_services'?)" in str(caught.value)

    def test_a_misspelled_argument_lists_the_hooks_arguments(self) -> None:
        module = _module(
            "tk_nodes",
            """
            import noderole

            @noderole.hookimpl
            def noderole_services(nodes):
                return []
            """,
        )
        with pytest.raises(PluginError) as caught:
            load_plugins(plugins=[("typo", module)], autoload=False)
        message = str(caught.value)
        assert "cannot be registered" in message
        assert "The arguments of noderole_services are: node (an implementation takes any of" in (
            message
        )
        assert "not 'nodes' (did you mean 'node'?)" in message


def _module(name: str, source: str) -> object:
    import textwrap
    import types

    module = types.ModuleType(name)
    exec(textwrap.dedent(source), module.__dict__)  # the test's own plugin source
    return module


BAD_TABLES = {
    "mapping": 'settings={"port": 1}',
    "dicts": 'settings=[{"name": "port", "type": int, "default": 1}]',
}


class TestAMalformedSettingsTable:
    @pytest.mark.parametrize("kind", sorted(BAD_TABLES))
    def test_plan_names_the_plugin_the_hook_and_the_field(
        self, tmp_path: Path, install_dist: Callable[..., Path], kind: str
    ) -> None:
        """Exit 5 naming the plugin, the hook, the field, what was given and what is expected.
        Before, an AttributeError traceback from the configuration's loading, exit 1."""
        source = f"""
            import noderole

            @noderole.hookimpl
            def noderole_settings():
                return noderole.SettingsTable(table="bad", {BAD_TABLES[kind]})
        """
        install_dist("tk-bad", "1.0", {"badtable": "tk_bad"}, {"tk_bad": source})
        result = _cli(tmp_path, "plan", "server")
        assert result.exit_code == ExitCode.DEFINITION, result.output
        message = _one_line(result.output)
        assert "plugin 'badtable' (entry point 'badtable = tk_bad'" in message
        assert "hook noderole_settings: SettingsTable" in message
        assert "field 'settings'" in message
        assert "(dict)" in message or "got the dict" in message
        assert "noderole.Setting(name=..., type=..., default=..." in message
        assert "Traceback" not in result.output

    @pytest.mark.parametrize("kind", sorted(BAD_TABLES))
    def test_the_testing_kit_raises_the_same(self, kind: str) -> None:
        from noderole.errors import DefinitionError
        from noderole.testing import plan_from_plugins

        module = _module(
            "tk_kit_table",
            f"""
            import noderole

            @noderole.hookimpl
            def noderole_settings():
                return noderole.SettingsTable(table="bad", {BAD_TABLES[kind]})
            """,
        )
        with pytest.raises(DefinitionError, match="hook noderole_settings: SettingsTable"):
            plan_from_plugins("server", ("bad", module))


class TestATableNobodyDeclares:
    def test_the_plugin_asking_is_named_with_the_close_table(
        self, tmp_path: Path, install_dist: Callable[..., Path]
    ) -> None:
        """node.settings("timekeeeper"): a plugin error (exit 3) naming the plugin and the hook
        that asked, with the table it probably meant. Before: exit 4, a configuration error
        config.toml could not fix, naming neither."""
        source = """
            import noderole

            @noderole.hookimpl
            def noderole_settings():
                return noderole.SettingsTable(table="timekeeper", settings=[
                    noderole.Setting(name="port", type=int, default=123)])

            @noderole.hookimpl
            def noderole_services(node):
                node.settings("timekeeeper")
                return []
        """
        install_dist("tk-typo", "1.0", {"timekeeper": "tk_typo"}, {"tk_typo": source})
        result = _cli(tmp_path, "plan", "server")
        assert result.exit_code == ExitCode.PLUGIN, result.output
        message = _one_line(result.output)
        assert "plugin 'timekeeper' (entry point 'timekeeper = tk_typo'" in message
        assert "hook noderole_services: no plugin declares the settings table" in message
        assert "[timekeeeper] (did you mean 'timekeeper'?)" in message


class TestClearerMessages:
    def test_a_need_of_no_known_name_suggests_the_close_one(self) -> None:
        from noderole.errors import PlanError
        from noderole.testing import plan_from_plugins

        module = _module(
            "tk_need",
            """
            import noderole

            @noderole.hookimpl
            def noderole_services(node):
                return [
                    noderole.Service(name="chronyd", roles=["other"], command=["/usr/bin/c"]),
                    noderole.Service(name="app", roles=["demo"], command=["/usr/bin/a"],
                                     need=["chrony"]),
                ]
            """,
        )
        with pytest.raises(PlanError, match=r"No service is called 'chrony' \(did you mean "):
            plan_from_plugins("demo", ("need", module))

    def test_a_nested_list_is_named_as_such(self) -> None:
        from noderole.testing import plan_from_plugins

        module = _module(
            "tk_nested",
            """
            import noderole

            @noderole.hookimpl
            def noderole_services(node):
                return [[noderole.Service(name="a", roles=["demo"], command=["/usr/bin/a"])]]
            """,
        )
        with pytest.raises(PluginError) as caught:
            plan_from_plugins("demo", ("nested", module))
        message = str(caught.value)
        assert "returned a list holding a list ([Service(" in message
        assert "a list inside the list is not accepted" in message
        assert "in one flat list" in message

    def test_a_plugins_table_named_noderole_is_reserved(self) -> None:
        from noderole.testing import plan_from_plugins

        module = _module(
            "tk_reserved",
            """
            import noderole

            @noderole.hookimpl
            def noderole_settings():
                return noderole.SettingsTable(table="noderole", settings=[])
            """,
        )
        with pytest.raises(PluginError) as caught:
            plan_from_plugins("demo", ("reserved", module))
        message = str(caught.value)
        assert "[noderole], which is reserved for noderole's own settings" in message
        assert "rename the plugin's table" in message
        assert "--disable-plugin" not in message

    def test_call_hook_of_no_hook_says_so(self) -> None:
        from noderole.testing import call_hook

        module = _module("tk_call", FUNCTION)
        with pytest.raises(LookupError) as caught:
            call_hook(("call", module), "noderole_service")
        message = str(caught.value)
        assert "there is no hook 'noderole_service' (did you mean 'noderole_services'?)" in (
            message
        )
        with pytest.raises(LookupError, match="does not implement noderole_settings"):
            call_hook(("call", module), "noderole_settings")
