"""Rehearsal inputs as data: programs, input files, settings merged per table and key, ports."""

from __future__ import annotations

import itertools
import tomllib
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

import noderole
from noderole.cli import cli
from noderole.cli._app import App
from noderole.config import CONFIG_PATH, load_config
from noderole.errors import DefinitionError, ExitCode, PluginError
from noderole.plugins import load_plugins
from noderole.rehearsal import (
    FreePort,
    RehearsalFile,
    RehearsalSetting,
    merge_inputs,
    render_config,
    stage_rehearsal,
)
from noderole.root import NodeRoot
from noderole.testing import node_context


def stamped(record: Any, origin: str) -> Any:
    return attrs.evolve(record, origin=origin)


def ports(start: int = 40000) -> Callable[[], int]:
    """A port picker counting up, so a test sees how often the rehearsal asked."""
    counter = itertools.count(start)
    return lambda: next(counter)


class TestMerge:
    def test_input_files_from_several_plugins_are_joined(self) -> None:
        """Two plugins' input files for one path are joined by plugin name, strictest mode."""
        a = stamped(RehearsalFile(path="/etc/x.env", content="A=1", mode=0o644), "a")
        b = stamped(RehearsalFile(path="/etc/x.env", content="B=2\n", mode=0o600), "b")
        assert merge_inputs([b, a]).files == {"/etc/x.env": ("A=1\nB=2\n", 0o600)}

    def test_a_standin_without_execute_bit_is_an_input_file(self) -> None:
        """The earlier spelling (a StandIn with mode 0644) is still read as an input file."""
        a = stamped(noderole.StandIn(path="/etc/x.env", content="A=1\n", mode=0o644), "a")
        b = stamped(RehearsalFile(path="/etc/x.env", content="B=2\n"), "b")
        assert merge_inputs([a, b]).files["/etc/x.env"] == ("A=1\nB=2\n", 0o644)

    def test_two_programs_at_one_path_name_both_plugins(self) -> None:
        """Two plugins supplying the same stand-in program is an error naming both."""
        a = stamped(noderole.StandIn(path="/usr/bin/x", content="#!/bin/sh\n"), "a")
        b = stamped(noderole.StandIn(path="/usr/bin/x", content="#!/bin/sh\n"), "b")
        with pytest.raises(PluginError, match="plugin 'a' and plugin 'b' both supply"):
            merge_inputs([a, b])

    def test_settings_of_one_table_from_two_plugins_merge(self) -> None:
        """Two plugins adding keys to [noderole] merge per key (no "declare twice" error)."""
        a = stamped(RehearsalSetting(table="noderole", key="net_timeout", value=5.0), "a")
        b = stamped(RehearsalSetting(table="noderole", key="cgroups_timeout", value=3.0), "b")
        settings = merge_inputs([a, b]).settings
        assert settings["noderole"] == {
            "net_check": False,
            "net_timeout": 5.0,
            "cgroups_timeout": 3.0,
        }

    def test_the_same_value_twice_agrees(self) -> None:
        """Two plugins giving one key the same value is not a conflict."""
        a = stamped(RehearsalSetting(table="t", key="k", value=[1, 2]), "a")
        b = stamped(RehearsalSetting(table="t", key="k", value=(1, 2)), "b")
        assert merge_inputs([a, b]).settings["t"] == {"k": [1, 2]}

    def test_conflicting_values_name_both_plugins_and_the_key(self) -> None:
        """Different values for one key name the table, the key, both values and both plugins."""
        a = stamped(RehearsalSetting(table="t", key="k", value=1), "alpha")
        b = stamped(RehearsalSetting(table="t", key="k", value=2), "beta")
        with pytest.raises(PluginError) as excinfo:
            merge_inputs([a, b])
        message = str(excinfo.value)
        assert "[t] k" in message
        assert "1 from plugin 'alpha'" in message
        assert "2 from plugin 'beta'" in message

    def test_true_and_one_are_different_values(self) -> None:
        """true and 1 differ in TOML, so two plugins giving them for one key conflict."""
        a = stamped(RehearsalSetting(table="t", key="k", value=True), "a")
        b = stamped(RehearsalSetting(table="t", key="k", value=1), "b")
        with pytest.raises(PluginError, match=r"True from plugin 'a', 1 from plugin 'b'"):
            merge_inputs([a, b])

    def test_the_core_setting_conflicts_too(self) -> None:
        """A plugin may not turn the rehearsal's own net_check back on."""
        a = stamped(RehearsalSetting(table="noderole", key="net_check", value=True), "a")
        with pytest.raises(PluginError, match=r"plugin 'builtin'.*plugin 'a'"):
            merge_inputs([a])

    def test_a_free_port_is_chosen_once_per_key(self) -> None:
        """Each FreePort key gets one port; two plugins asking for one key share it."""
        picker = ports()
        a = stamped(FreePort(table="t", key="health"), "a")
        b = stamped(FreePort(table="t", key="health"), "b")
        c = stamped(FreePort(table="u", key="admin"), "c")
        settings = merge_inputs([a, b, c], pick_port=picker).settings
        assert settings["t"] == {"health": 40000}
        assert settings["u"] == {"admin": 40001}
        assert picker() == 40002  # the rehearsal asked exactly twice

    def test_a_port_and_a_fixed_value_conflict(self) -> None:
        """A FreePort and a RehearsalSetting for one key conflict, naming both plugins."""
        a = stamped(FreePort(table="t", key="port"), "a")
        b = stamped(RehearsalSetting(table="t", key="port", value=80), "b")
        with pytest.raises(PluginError, match="a free port from plugin 'a'"):
            merge_inputs([a, b], pick_port=ports())

    def test_config_toml_as_a_file_is_refused(self) -> None:
        """config.toml is the rehearsal's: a file at its path names the plugin and the fix."""
        a = stamped(RehearsalFile(path=CONFIG_PATH, content="[x]\n"), "a")
        with pytest.raises(PluginError, match=r"plugin 'a' supplies .*RehearsalSetting"):
            merge_inputs([a])


class TestRecords:
    def test_an_executable_input_file_is_refused(self) -> None:
        """A RehearsalFile is never a program: an execute bit is a DefinitionError."""
        with pytest.raises(DefinitionError, match=r"noderole\.StandIn"):
            RehearsalFile(path="/usr/bin/x", content="#!/bin/sh\n", mode=0o755)

    @pytest.mark.parametrize(
        ("make", "field"),
        [
            (lambda: RehearsalFile(path="etc/x", content=""), "path"),
            (lambda: RehearsalSetting(table="a b", key="k", value=1), "table"),
            (lambda: RehearsalSetting(table="t", key="k", value={"a": 1}), "value"),
            (lambda: FreePort(table="t", key=""), "key"),
        ],
    )
    def test_bad_fields_name_the_record_and_field(self, make: Any, field: str) -> None:
        """Each invalid field is a DefinitionError naming the record and the field."""
        with pytest.raises(DefinitionError, match=field):
            make()

    @pytest.mark.parametrize("path", ["/../../../../srv/x", "/etc/../../x", "/etc/a\0b"])
    def test_an_input_file_path_is_held_to_a_standins_rules(self, path: str) -> None:
        """RehearsalFile checked only for a leading '/': a '..' climbing above / reached the
        scratch root's writer and ended in a traceback. It is refused as a StandIn's path is."""
        with pytest.raises(DefinitionError) as as_standin:
            noderole.StandIn(path=path, content="x")
        with pytest.raises(DefinitionError) as as_file:
            RehearsalFile(path=path, content="x")
        assert str(as_file.value) == str(as_standin.value).replace("StandIn", "RehearsalFile")


class TestConfigText:
    def test_rendered_config_is_toml_with_noderole_first(self) -> None:
        """The text parses back to the same tables; [noderole] comes first."""
        settings: dict[str, dict[str, Any]] = {
            "zeta": {"s": 'quote " and \\ back', "l": ["a", 1]},
            "noderole": {"net_check": False},
        }
        text = render_config(settings)
        assert tomllib.loads(text) == settings
        assert text.index("[noderole]") < text.index("[zeta]")


def _plugin(name: str, records: list[Any]) -> types.ModuleType:
    module = types.ModuleType(name)
    module.noderole_standins = noderole.hookimpl(lambda node: records)  # type: ignore[attr-defined]
    return module


class TestStage:
    def test_staged_root_loads_with_every_plugins_settings(self, tmp_path: Path) -> None:
        """Two plugins' [noderole] keys and a free port land in one config.toml that loads."""
        one = _plugin("one", [RehearsalSetting(table="noderole", key="net_timeout", value=9.0)])
        two = _plugin(
            "two",
            [
                RehearsalSetting(table="noderole", key="cgroups_timeout", value=4.0),
                RehearsalFile(path="/etc/two.env", content="X=1\n", mode=0o600),
                noderole.StandIn(path="/usr/local/bin/two", content="#!/bin/sh\nexit 0\n"),
            ],
        )
        node = node_context(("one", one), ("two", two), node_root=tmp_path)
        plugins = load_plugins(autoload=False, plugins=[("one", one), ("two", two)])
        stage_rehearsal(node.root, plugins, node, pick_port=ports())
        root = NodeRoot(tmp_path)
        config = load_config(root, plugins.settings_tables()).table("noderole")
        assert (config["net_check"], config["net_timeout"], config["cgroups_timeout"]) == (
            False,
            9.0,
            4.0,
        )
        assert (tmp_path / "etc/two.env").stat().st_mode & 0o777 == 0o600
        assert (tmp_path / "usr/local/bin/two").stat().st_mode & 0o777 == 0o755

    @pytest.mark.parametrize(
        ("record", "where"),
        [
            (FreePort(table="nope", key="port"), "no plugin declares a table [nope]"),
            (
                RehearsalSetting(table="noderole", key="net_chek", value=True),
                "table [noderole] has no setting 'net_chek' (did you mean 'net_check'?)",
            ),
        ],
    )
    def test_a_setting_no_plugin_declares_is_the_plugins_error(
        self, tmp_path: Path, record: Any, where: str
    ) -> None:
        """A plugin's rehearsal value for a table or key nobody declares was written into
        config.toml and reported as the operator's error in it (exit 4), the plugin unnamed.
        It is the plugin's (exit 3), named, and nothing is written."""
        hunt = _plugin("hunt", [record])
        node = node_context(("hunt", hunt), node_root=tmp_path)
        plugins = load_plugins(autoload=False, plugins=[("hunt", hunt)])
        with pytest.raises(PluginError) as refused:
            stage_rehearsal(node.root, plugins, node, pick_port=ports())
        assert str(refused.value).startswith(
            f"plugin 'hunt' gives the rehearsal a value for [{record.table}] {record.key}, "
            f"but {where}"
        )
        assert refused.value.exit_code == ExitCode.PLUGIN
        assert sorted(p.name for p in tmp_path.rglob("*")) == []

    def test_a_conflict_writes_nothing(self, tmp_path: Path) -> None:
        """Every conflict is found before the first file is written."""
        one = _plugin(
            "one",
            [
                RehearsalFile(path="/etc/one.env", content="A=1\n"),
                RehearsalSetting(table="t", key="k", value=1),
            ],
        )
        two = _plugin("two", [RehearsalSetting(table="t", key="k", value=2)])
        node = node_context(("one", one), ("two", two), node_root=tmp_path)
        plugins = load_plugins(autoload=False, plugins=[("one", one), ("two", two)])
        with pytest.raises(PluginError):
            stage_rehearsal(node.root, plugins, node, pick_port=ports())
        assert sorted(p.name for p in tmp_path.rglob("*")) == []


class TestRehearseRefusesEscapingInputs:
    @pytest.mark.parametrize("kind", ["RehearsalFile", "StandIn"])
    def test_an_input_leaving_the_scratch_root_is_a_definition_error(
        self, tmp_path: Path, kind: str
    ) -> None:
        """noderole rehearse with a plugin's input file at /../../x: exit 5 naming the plugin
        (it ended in a traceback from staging the scratch root), nothing written outside."""
        outside = tmp_path / "escaped"
        path = "/.." * 40 + str(outside)
        module = types.ModuleType("escaping")

        def noderole_services(node: Any) -> list[noderole.Service]:
            return [noderole.Service(name="demo", roles=["demo"], command=["/usr/bin/demo"])]

        def noderole_standins(node: Any) -> list[Any]:
            record = getattr(noderole, kind)
            return [record(path=path, content="x", mode=0o644)]

        module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
        module.noderole_standins = noderole.hookimpl(noderole_standins)  # type: ignore[attr-defined]
        app = App(root=NodeRoot("/"), plugin_objects=(("escaping", module),), autoload=False)
        result = CliRunner().invoke(cli, ["rehearse", "demo"], obj=app)
        assert result.exit_code == ExitCode.DEFINITION, result.output
        assert "escaping" in result.stderr
        assert f"{kind}: field 'path' is " in result.stderr
        assert "climbs above the root" in result.stderr
        assert not outside.exists()
