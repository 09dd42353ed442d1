"""Plugin loading and record collection: every failure names the plugin and the hook."""

from __future__ import annotations

import os
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import noderole
from noderole.clock import FakeClock
from noderole.config import load_config
from noderole.context import NodeContext
from noderole.errors import DefinitionError, PluginError
from noderole.plugins import AUTOLOAD_ENV, PluginSet, load_plugins
from noderole.records import Service
from noderole.root import NodeRoot

GOOD = """
import noderole

@noderole.hookimpl
def noderole_services(node):
    return [noderole.Service(name="demo", roles=["agent"], command=["/bin/true"])]
"""


def _node(plugins: PluginSet, tmp_path: Path) -> NodeContext:
    root = NodeRoot(tmp_path)
    config = load_config(root, plugins.settings_tables())
    return NodeContext(
        root=root, config=config, pluginmanager=plugins.manager, clock=FakeClock(), plugins=plugins
    )


def _module(name: str, **hooks: Callable[..., Any]) -> types.ModuleType:
    module = types.ModuleType(name)
    for hook_name, function in hooks.items():
        setattr(module, hook_name, noderole.hookimpl(function))
    return module


class TestLoading:
    def test_builtin_plugin_loads_first(self) -> None:
        """The built-in plugin is always there and first."""
        plugins = load_plugins(autoload=False)
        assert plugins.names() == ["builtin"]

    def test_entry_point_plugin_is_loaded_with_its_distribution(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """An entry point of group `noderole` is loaded; its distribution and version are known."""
        install_dist("demo-plugin", "1.2", {"demo": "nr_demo_good"}, {"nr_demo_good": GOOD})
        plugins = load_plugins()
        info = plugins.info("demo")
        assert (info.distribution, info.version) == ("demo-plugin", "1.2")
        services = plugins.services(_node(plugins, tmp_path))
        demo = next(s for s in services if s.name == "demo")
        assert demo.origin == "demo"

    def test_disabled_plugin_is_never_imported(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """--disable-plugin acts before import: a plugin that would fail to import is skipped."""
        install_dist("broken", "0.1", {"broken": "nr_broken_import"}, {"nr_broken_import": "1/0"})
        plugins = load_plugins(disabled=["broken"])
        assert "broken" not in plugins.names()

    def test_autoload_can_be_turned_off_by_environment(
        self, install_dist: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """NODEROLE_DISABLE_PLUGIN_AUTOLOAD=1 loads no entry point at all."""
        install_dist("broken", "0.1", {"broken": "nr_broken_import2"}, {"nr_broken_import2": "1/0"})
        monkeypatch.setenv(AUTOLOAD_ENV, "1")
        assert load_plugins().names() == ["builtin"]

    def test_import_failure_names_entry_point_and_distribution(
        self, install_dist: Callable[..., Path]
    ) -> None:
        """A plugin that fails to import is reported with entry point, distribution and cause."""
        install_dist("broken", "0.1", {"broken": "nr_broken_import3"}, {"nr_broken_import3": "1/0"})
        with pytest.raises(PluginError) as excinfo:
            load_plugins()
        message = str(excinfo.value)
        assert "entry point 'broken = nr_broken_import3'" in message
        assert "distribution 'broken' 0.1" in message
        assert "ZeroDivisionError" in message
        assert "--disable-plugin broken" in message

    def test_misspelled_hook_is_reported(self, install_dist: Callable[..., Path]) -> None:
        """A hookimpl whose name matches no hookspec fails check_pending, naming the plugin."""
        source = "import noderole\n@noderole.hookimpl\ndef noderole_servces(node):\n    return []\n"
        install_dist("typo", "1.0", {"typo": "nr_typo"}, {"nr_typo": source})
        with pytest.raises(PluginError, match=r"plugin 'typo'.*noderole_servces"):
            load_plugins()

    def test_unknown_hook_argument_is_reported(self) -> None:
        """A hookimpl declaring an argument the hook does not have is refused at registration."""

        def noderole_services(node: Any, nodes: Any) -> None:
            return None

        with pytest.raises(PluginError, match=r"plugin 'bad'.*nodes"):
            load_plugins(
                autoload=False,
                plugins=[("bad", _module("bad", noderole_services=noderole_services))],
            )

    def test_plugins_extend_each_other_with_their_own_hookspecs(self, tmp_path: Path) -> None:
        """A plugin's noderole_addhooks adds hookspecs other plugins implement, in any order."""
        specs = types.ModuleType("specs")

        @noderole.hookspec
        def demo_extra_flags() -> list[str]:  # pragma: no cover - a spec
            """Flags."""
            return []

        specs.demo_extra_flags = demo_extra_flags  # type: ignore[attr-defined]

        def noderole_addhooks(pluginmanager: Any) -> None:
            pluginmanager.add_hookspecs(specs)

        def noderole_services(node: Any) -> Service:
            flags = sorted(f for group in node.hook.demo_extra_flags() for f in group)
            return Service(name="host", roles=["r"], command=["/bin/host", *flags])

        def demo_extra_flags_impl() -> list[str]:
            return ["--from-contrib"]

        contrib = types.ModuleType("contrib")
        contrib.demo_extra_flags = noderole.hookimpl(specname="demo_extra_flags")(  # type: ignore[attr-defined]
            demo_extra_flags_impl
        )
        host = _module(
            "host", noderole_addhooks=noderole_addhooks, noderole_services=noderole_services
        )
        # contrib registered before the plugin that declares its hookspec
        plugins = load_plugins(autoload=False, plugins=[("contrib", contrib), ("host", host)])
        services = plugins.services(_node(plugins, tmp_path))
        assert next(s for s in services if s.name == "host").command == (
            "/bin/host",
            "--from-contrib",
        )

    def test_managers_are_independent(self) -> None:
        """Each invocation builds its own manager: no global state leaks between them."""
        first = load_plugins(autoload=False, plugins=[("x", _module("x"))])
        second = load_plugins(autoload=False)
        assert first.manager is not second.manager
        assert "x" not in second.names()


class TestCollect:
    @pytest.fixture
    def collect(self, tmp_path: Path) -> Callable[..., list[Service]]:
        def run(function: Callable[..., Any], timeout: float = 5.0) -> list[Service]:
            plugins = load_plugins(
                autoload=False,
                plugins=[("p", _module("p", noderole_services=function))],
                hook_timeout=timeout,
            )
            return [s for s in plugins.services(_node(plugins, tmp_path)) if s.origin == "p"]

        return run

    def test_single_record_list_generator_and_none(
        self, collect: Callable[..., list[Service]]
    ) -> None:
        """A hook may return one record, a list, a generator or None; all are flattened."""

        def one(node: Any) -> Service:
            return Service(name="a")

        def many(node: Any) -> list[Service]:
            return [Service(name="a"), Service(name="b")]

        def generated(node: Any) -> Iterator[Service]:
            yield Service(name="c")

        def nothing(node: Any) -> None:
            return None

        assert [s.name for s in collect(one)] == ["a"]
        assert [s.name for s in collect(many)] == ["a", "b"]
        assert [s.name for s in collect(generated)] == ["c"]
        assert collect(nothing) == []

    def test_origin_is_stamped_but_not_compared(
        self, collect: Callable[..., list[Service]]
    ) -> None:
        """Records carry the plugin name as origin, which equality ignores."""
        (service,) = collect(lambda node: Service(name="a"))
        assert service.origin == "p"
        assert service == Service(name="a")

    def test_wrong_type_names_plugin_and_hook(self, collect: Callable[..., list[Service]]) -> None:
        """Returning something that is not a Service is an error naming plugin and hook."""
        with pytest.raises(PluginError, match=r"plugin 'p' hook noderole_services returned 'oops'"):
            collect(lambda node: ["oops"])

    @pytest.mark.parametrize(
        ("returned", "shown"),
        [
            ({"name": "a"}, "returned {'name': 'a'} (dict)"),
            ([None, Service(name="a")], "returned a list holding None (NoneType)"),
            (["oops"], "returned 'oops' (str)"),
        ],
    )
    def test_what_was_returned_is_shown_as_returned(
        self, collect: Callable[..., list[Service]], returned: object, shown: str
    ) -> None:
        """A dict was reported as its first key ("returned 'name' (str)"), and a None in a
        list as "returned None", beside "(a single one, a list, or None)"."""
        with pytest.raises(PluginError) as refused:
            collect(lambda node: returned)
        assert f"hook noderole_services {shown}; it must return Service records" in str(
            refused.value
        )

    @pytest.mark.parametrize("kind", ["wrapper", "hookwrapper"])
    def test_a_wrapper_of_a_record_hook_is_refused(self, tmp_path: Path, kind: str) -> None:
        """A record hook's wrapper was skipped in silence: its services never came, and the
        role it added was 'unknown'. It is refused, naming the plugin and what to write."""
        module = types.ModuleType("w")

        def noderole_services(node: Any) -> Any:
            return (yield)

        mark = noderole.hookimpl(wrapper=kind == "wrapper", hookwrapper=kind == "hookwrapper")
        module.noderole_services = mark(noderole_services)  # type: ignore[attr-defined]
        plugins = load_plugins(autoload=False, plugins=[("w", module)])
        with pytest.raises(PluginError) as refused:
            plugins.services(_node(plugins, tmp_path))
        assert str(refused.value) == (
            f"plugin 'w' implements noderole_services as a wrapper ({kind}=True), which "
            "noderole never calls: it calls a record hook one plugin at a time, so that a "
            "failure names its plugin; make it a plain @noderole.hookimpl returning records"
        )

    def test_raising_hook_names_plugin_and_hook(
        self, collect: Callable[..., list[Service]]
    ) -> None:
        """An exception in a hook is reported with the plugin, the hook and the cause."""

        def boom(node: Any) -> None:
            raise RuntimeError("disk on fire")

        with pytest.raises(
            PluginError,
            match=r"plugin 'p' hook noderole_services raised RuntimeError: disk on fire",
        ):
            collect(boom)

    def test_generator_raising_later_names_plugin(
        self, collect: Callable[..., list[Service]]
    ) -> None:
        """A generator that raises while being consumed is still attributed to its plugin."""

        def gen(node: Any) -> Iterator[Service]:
            yield Service(name="a")
            raise KeyError("late")

        with pytest.raises(PluginError, match=r"plugin 'p' hook noderole_services raised KeyError"):
            collect(gen)

    def test_invalid_record_names_plugin_field_and_service(
        self, collect: Callable[..., list[Service]]
    ) -> None:
        """A record built with a bad field fails naming the plugin, the service and the field."""

        def bad(node: Any) -> Service:
            return Service(name="x", command=["relative/path"])

        with pytest.raises(DefinitionError) as excinfo:
            collect(bad)
        assert "plugin 'p' hook noderole_services" in str(excinfo.value)
        assert "Service 'x': field 'command' must start with an absolute path" in str(excinfo.value)

    def test_hung_hook_is_bounded(self, collect: Callable[..., list[Service]]) -> None:
        """A hook that never returns is reported after the hook timeout, naming the plugin."""
        import threading

        release = threading.Event()

        def hang(node: Any) -> None:
            release.wait(30)

        try:
            with pytest.raises(
                PluginError, match=r"plugin 'p' hook noderole_services did not return within 0.05s"
            ):
                collect(hang, timeout=0.05)
        finally:
            release.set()

    def test_duplicate_settings_table_names_both_plugins(self) -> None:
        """Two plugins declaring the same settings table is an error naming both."""

        def settings() -> noderole.SettingsTable:
            return noderole.SettingsTable(table="same", settings=[])

        plugins = load_plugins(
            autoload=False,
            plugins=[
                ("one", _module("one", noderole_settings=settings)),
                ("two", _module("two", noderole_settings=settings)),
            ],
        )
        with pytest.raises(PluginError, match=r"'one' and plugin 'two'|'two' and plugin 'one'"):
            plugins.settings_tables()


def _host_with_hook() -> types.ModuleType:
    """A plugin adding ``noderole_test_extra(node)`` for other plugins to implement."""
    specs = types.ModuleType("specs")

    def noderole_test_extra(node: Any) -> Any:
        """Services other plugins offer the host."""

    specs.noderole_test_extra = noderole.hookspec(noderole_test_extra)  # type: ignore[attr-defined]

    def noderole_addhooks(pluginmanager: Any) -> None:
        pluginmanager.add_hookspecs(specs)

    return _module("host", noderole_addhooks=noderole_addhooks)


def _service(name: str) -> Service:
    return Service(name=name, roles=["agent"], command=["/bin/true"])


class TestNodeCollect:
    def _node(self, tmp_path: Path, timeout: float = 5.0, **contributors: Any) -> NodeContext:
        pairs = [("host", _host_with_hook())]
        pairs += [
            (name, _module(name, noderole_test_extra=function))
            for name, function in contributors.items()
        ]
        plugins = load_plugins(autoload=False, plugins=pairs, hook_timeout=timeout)
        return _node(plugins, tmp_path)

    def test_records_flattened_and_stamped(self, tmp_path: Path) -> None:
        """collect() flattens every plugin's answer and stamps each record with its plugin."""
        node = self._node(
            tmp_path,
            one=lambda node: _service("a"),
            two=lambda node: (_service(n) for n in ("b", "c")),
            three=lambda node: None,
        )
        found = node.collect("noderole_test_extra", Service)
        assert sorted((s.name, s.origin) for s in found) == [
            ("a", "one"),
            ("b", "two"),
            ("c", "two"),
        ]

    def test_wrong_type_names_plugin_and_hook(self, tmp_path: Path) -> None:
        """A record of the wrong kind is a PluginError naming the plugin, the hook and the kind."""
        node = self._node(tmp_path, odd=lambda node: {"name": "a"})
        with pytest.raises(PluginError, match=r"plugin 'odd' hook noderole_test_extra .*Service"):
            node.collect("noderole_test_extra", Service)

    def test_raising_hook_names_plugin(self, tmp_path: Path) -> None:
        """An exception in a contributor is reported naming it and the hook."""

        def boom(node: Any) -> None:
            raise RuntimeError("boom")

        node = self._node(tmp_path, broken=boom)
        with pytest.raises(PluginError, match=r"plugin 'broken' hook noderole_test_extra raised"):
            node.collect("noderole_test_extra", Service)

    def test_hung_hook_is_bounded_by_the_core_timeout(self, tmp_path: Path) -> None:
        """A contributor that blocks is reported after the invocation's hook timeout."""
        import threading

        release = threading.Event()
        node = self._node(tmp_path, timeout=0.05, stuck=lambda node: release.wait(30))
        try:
            with pytest.raises(PluginError, match=r"plugin 'stuck' .*did not return within 0.05s"):
                node.collect("noderole_test_extra", Service)
        finally:
            release.set()

    def test_unknown_hook_is_a_clear_error(self, tmp_path: Path) -> None:
        """Collecting a hook nobody added says so, instead of an AttributeError."""
        node = self._node(tmp_path)
        with pytest.raises(PluginError, match=r"no hook named 'noderole_nope'"):
            node.collect("noderole_nope", Service)

    def test_extra_arguments_reach_the_hook(self, tmp_path: Path) -> None:
        """A hook argument the caller does not pass is named, not a KeyError."""
        specs = types.ModuleType("specs2")

        def noderole_test_args(node: Any, flavour: Any) -> Any:
            """A hook with a second argument."""

        specs.noderole_test_args = noderole.hookspec(noderole_test_args)  # type: ignore[attr-defined]
        host = _module(
            "host2", noderole_addhooks=lambda pluginmanager: pluginmanager.add_hookspecs(specs)
        )
        user = _module("user", noderole_test_args=lambda node, flavour: _service(flavour))
        plugins = load_plugins(autoload=False, plugins=[("host2", host), ("user", user)])
        node = _node(plugins, tmp_path)
        assert [s.name for s in node.collect("noderole_test_args", Service, flavour="x")] == ["x"]
        with pytest.raises(PluginError, match=r"plugin 'user' .*takes flavour"):
            node.collect("noderole_test_args", Service)

    def test_collect_without_the_loaded_plugins_names_the_fix(self, tmp_path: Path) -> None:
        """A context built by hand over a bare plugin manager cannot call hooks one by one: the
        error says to pass plugins= (or use the kit's node_context)."""
        plugins = load_plugins(autoload=False)
        root = NodeRoot(tmp_path)
        config = load_config(root, plugins.settings_tables())
        node = NodeContext(root=root, config=config, pluginmanager=plugins.manager)
        with pytest.raises(PluginError, match=r"collect\('noderole_services'\).*plugins="):
            node.collect("noderole_services", Service)

    def test_role_defaults_to_none(self, tmp_path: Path) -> None:
        """node.role is None unless the invocation is about one role."""
        plugins = load_plugins(autoload=False)
        assert _node(plugins, tmp_path).role is None
        root = NodeRoot(tmp_path)
        config = load_config(root, plugins.settings_tables())
        node = NodeContext(root=root, config=config, pluginmanager=plugins.manager, role="agent")
        assert node.role == "agent"


class TestResolveRole:
    def _resolve(self, tmp_path: Path, **answers: Any) -> str | None:
        from noderole.plugins import resolve_role

        pairs = [
            (name, _module(name, noderole_resolve_role=lambda node, value=value: value))
            for name, value in answers.items()
        ]
        plugins = load_plugins(autoload=False, plugins=pairs)
        return resolve_role(plugins, _node(plugins, tmp_path))

    def test_no_resolver_is_none(self, tmp_path: Path) -> None:
        """Without any plugin answering, there is no role."""
        assert self._resolve(tmp_path) is None
        assert self._resolve(tmp_path, quiet=None) is None

    def test_first_answer_wins_and_agreement_is_fine(self, tmp_path: Path) -> None:
        """One answer, or several that agree, give the role; None answers are skipped."""
        assert self._resolve(tmp_path, a=None, b="server") == "server"
        assert self._resolve(tmp_path, a="agent", b="agent") == "agent"

    def test_disagreement_names_both_plugins(self, tmp_path: Path) -> None:
        """Two plugins resolving different roles is an error naming both and both roles."""
        with pytest.raises(PluginError) as excinfo:
            self._resolve(tmp_path, alpha="server", beta="agent")
        message = str(excinfo.value)
        assert "plugin 'alpha' resolves 'server'" in message
        assert "plugin 'beta' resolves 'agent'" in message

    def test_a_non_string_answer_names_the_plugin(self, tmp_path: Path) -> None:
        """A resolver returning something other than a role name is refused, naming it."""
        with pytest.raises(PluginError, match=r"plugin 'odd' hook noderole_resolve_role"):
            self._resolve(tmp_path, odd=3)


class TestPluginSetOver:
    def test_the_loaded_set_is_found_again(self) -> None:
        """A NodeContext built from a loaded manager calls hooks through the same PluginSet
        (same descriptions, same timeout)."""
        plugins = load_plugins(autoload=False, hook_timeout=7.0)
        assert PluginSet.over(plugins.manager) is plugins

    def test_a_bare_manager_gets_a_set_with_the_default_timeout(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A manager noderole did not load still gets collect(), named after its plugins."""
        import pluggy

        from noderole import hookspecs

        monkeypatch.setenv("NODEROLE_HOOK_TIMEOUT", "9")
        manager = pluggy.PluginManager(hookspecs.PROJECT)
        manager.add_hookspecs(hookspecs)
        manager.register(_module("solo"), name="solo")
        bare = PluginSet.over(manager)
        assert bare.names() == ["solo"]
        assert bare.hook_timeout == 9.0


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("nan", "must be a finite number of seconds greater than 0"),
        ("inf", "must be a finite number of seconds greater than 0"),
        ("1e400", "must be a finite number of seconds greater than 0"),
        ("-5", "must be a finite number of seconds greater than 0"),
        ("0", "must be a finite number of seconds greater than 0"),
        ("abc", "is not a number of seconds"),
    ],
)
def test_hook_timeout_from_the_environment_is_refused_unless_finite(
    monkeypatch: pytest.MonkeyPatch, value: str, why: str
) -> None:
    """NODEROLE_HOOK_TIMEOUT bounds every hook call; NaN or infinity bounded none (NaN
    compared false with 0 and was taken, leaving a hung plugin to hang the boot)."""
    import pluggy

    from noderole import hookspecs

    monkeypatch.setenv("NODEROLE_HOOK_TIMEOUT", value)
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    with pytest.raises(PluginError) as caught:
        PluginSet.over(manager)
    assert str(caught.value) == f"NODEROLE_HOOK_TIMEOUT={value!r} {why}"


class TestBaseExceptions:
    """SystemExit and KeyboardInterrupt raised by plugin code are that plugin's error."""

    @pytest.mark.parametrize(
        ("error", "line"),
        [(SystemExit(0), "SystemExit: 0"), (KeyboardInterrupt(), "KeyboardInterrupt")],
    )
    def test_raised_in_a_hook(self, tmp_path: Path, error: BaseException, line: str) -> None:
        """A hook raising a BaseException: a PluginError naming plugin and hook, not an exit."""

        def noderole_services(node: Any) -> None:
            raise error

        plugins = load_plugins(
            autoload=False, plugins=[("p", _module("p", noderole_services=noderole_services))]
        )
        with pytest.raises(PluginError, match=rf"plugin 'p' hook noderole_services raised {line}"):
            plugins.services(_node(plugins, tmp_path))

    def test_raised_while_registering(self) -> None:
        """SystemExit from noderole_addhooks (called as the plugin registers) names the plugin."""

        def noderole_addhooks(pluginmanager: Any) -> None:
            raise SystemExit(3)

        with pytest.raises(
            PluginError, match=r"plugin 'p' failed while registering.*SystemExit: 3"
        ):
            load_plugins(
                autoload=False, plugins=[("p", _module("p", noderole_addhooks=noderole_addhooks))]
            )

    def test_broken_plugins_are_set_aside_on_request(self, tmp_path: Path) -> None:
        """services(broken=...) keeps the others' services and records the failing plugin."""

        def fails(node: Any) -> None:
            raise RuntimeError("disk on fire")

        def works(node: Any) -> Service:
            return Service(name="ok", roles=["r"], command=["/bin/true"])

        plugins = load_plugins(
            autoload=False,
            plugins=[
                ("bad", _module("bad", noderole_services=fails)),
                ("good", _module("good", noderole_services=works)),
            ],
        )
        broken: dict[str, Any] = {}
        services = plugins.services(_node(plugins, tmp_path), broken=broken)
        assert [s.name for s in services if s.origin == "good"] == ["ok"]
        assert list(broken) == ["bad"]
        assert "RuntimeError: disk on fire" in str(broken["bad"])


class TestOneHandOver:
    """A hook's implementations go to the worker together (noderole.bounded.run_bounded_each):
    the calls are the ones, and in the order, that calling the plugins one by one makes."""

    @staticmethod
    def _plugins(timeout: float = 5.0, **hooks: Callable[..., Any]) -> PluginSet:
        return load_plugins(
            autoload=False,
            plugins=[(name, _module(name, noderole_services=hook)) for name, hook in hooks.items()],
            hook_timeout=timeout,
        )

    @pytest.mark.parametrize(
        ("failure", "message"),
        [
            (lambda node: ["oops"], "returned 'oops'"),
            (lambda node: 1 / 0, "raised ZeroDivisionError"),
        ],
        ids=["wrong type", "raised"],
    )
    def test_the_first_failure_ends_the_call(
        self, tmp_path: Path, failure: Callable[..., Any], message: str
    ) -> None:
        """Without ``broken``, no plugin after a failing one is called."""
        called: list[str] = []

        def after(node: Any) -> None:
            called.append("after")

        plugins = self._plugins(first=failure, second=after)
        with pytest.raises(PluginError, match=rf"plugin 'first' hook noderole_services {message}"):
            plugins.services(_node(plugins, tmp_path))
        assert called == []

    def test_a_late_plugin_is_set_aside_and_the_next_still_called(self, tmp_path: Path) -> None:
        """With ``broken``, a hung plugin is reported late and the plugins after it are called
        (in a new worker), their records kept."""
        release = threading.Event()

        def hang(node: Any) -> None:
            release.wait(30)

        def works(node: Any) -> Service:
            return Service(name="ok", roles=["r"], command=["/bin/true"])

        plugins = self._plugins(timeout=0.5, slow=hang, good=works)
        broken: dict[str, Any] = {}
        try:
            services = plugins.services(_node(plugins, tmp_path), broken=broken)
        finally:
            release.set()
        assert [s.name for s in services if s.origin == "good"] == ["ok"]
        assert list(broken) == ["slow"]
        assert "did not return within 0.5s" in str(broken["slow"])

    def test_a_hang_in_a_hook_another_hook_called_names_the_plugin_that_hangs(
        self, tmp_path: Path
    ) -> None:
        """The k3s plugin collects konnectivity's hooks inside its own: when the inner one
        hangs, the report names it and says to disable it, not the plugin that called it."""
        release = threading.Event()
        hang = threading.Event()

        def outer(node: Any) -> None:
            node.collect("noderole_settings", object)

        def settings() -> None:
            if hang.is_set():
                release.wait(30)

        plugins = load_plugins(
            autoload=False,
            plugins=[
                ("caller", _module("caller", noderole_services=outer)),
                ("stuck", _module("stuck", noderole_settings=settings)),
            ],
            hook_timeout=0.5,
        )
        node = _node(plugins, tmp_path)  # reads the settings while nothing hangs
        hang.set()
        try:
            with pytest.raises(PluginError) as raised:
                plugins.services(node)
        finally:
            release.set()
        message = str(raised.value)
        assert message.startswith(
            "plugin 'caller' hook noderole_services did not return within 0.5s: it was waiting "
            "on plugin 'stuck' hook noderole_settings, which it called"
        )
        assert message.endswith("or disable it with --disable-plugin stuck")

    def test_a_hook_calling_other_plugins_hooks_runs_them_in_its_worker(
        self, tmp_path: Path
    ) -> None:
        """Nested collects run in the worker of the hook that makes them (its bound covers
        theirs), named after the call they make."""
        seen: list[tuple[int, str]] = []

        def outer(node: Any) -> None:
            seen.append((threading.get_ident(), threading.current_thread().name))
            node.collect("noderole_settings", object)

        def settings() -> None:
            seen.append((threading.get_ident(), threading.current_thread().name))

        plugins = load_plugins(
            autoload=False,
            plugins=[
                ("outer", _module("outer", noderole_services=outer)),
                ("inner", _module("inner", noderole_settings=settings)),
            ],
        )
        node = _node(plugins, tmp_path)  # reads the settings: a call of their own
        seen.clear()
        plugins.services(node)
        assert threading.get_ident() not in {ident for ident, _ in seen}
        assert len({ident for ident, _ in seen}) == 1
        assert [name for _, name in seen] == ["outer:noderole_services", "inner:noderole_settings"]


class TestHookDiscovery:
    """noderole's manager finds a module's hooks without pluggy's static lookup, and finds
    exactly what pluggy finds: same options object (or None) for every name, hook or not."""

    @staticmethod
    def _odd_module() -> types.ModuleType:
        """A module holding every kind of value pluggy treats differently."""
        impl = noderole.hookimpl
        module = types.ModuleType("odd_plugin")

        @impl
        def noderole_services() -> list[Service]:
            return []

        @impl(tryfirst=True)
        def noderole_settings() -> None:
            return None

        def plain() -> None:
            return None

        def not_a_dict() -> None:
            return None

        not_a_dict.noderole_impl = True  # type: ignore[attr-defined]

        def via_func() -> None:
            return None

        via_func.__func__ = noderole_services  # type: ignore[attr-defined]

        class Holder:
            @impl
            def method(self) -> None:
                return None

            @staticmethod
            @impl
            def static() -> None:
                return None

            @classmethod
            @impl
            def klass(cls) -> None:
                return None

        marked_class = type("Marked", (), {"noderole_impl": {}})

        class CallableWithMarker:
            noderole_impl: ClassVar[dict[str, object]] = {}

            def __call__(self) -> None:
                return None

        module.__dict__.update(
            noderole_services=noderole_services,
            noderole_settings=noderole_settings,
            plain=plain,
            not_a_dict=not_a_dict,
            via_func=via_func,
            bound=Holder().method,
            static_in_module=Holder.__dict__["static"],
            classmethod_in_module=Holder.__dict__["klass"],
            marked_class=marked_class,
            callable_instance=CallableWithMarker(),
            lam=impl(lambda: None),
            number=3,
            os=os,
            # The module type's own descriptor wins over the dict: pluggy sees no hook here.
            __annotations__=impl(lambda: None),
        )
        return module

    def _namespaces(self) -> list[object]:
        import noderole_k3s.hookspecs
        import noderole_k3s.plugin
        import noderole_konnectivity.plugin
        from noderole import builtin, hookspecs

        class Subclassed(types.ModuleType):
            pass

        odd = self._odd_module()
        sub = Subclassed("sub")
        sub.__dict__.update({k: v for k, v in odd.__dict__.items() if not k.startswith("__")})
        return [
            builtin,
            hookspecs,
            noderole_k3s.plugin,
            noderole_k3s.hookspecs,
            noderole_konnectivity.plugin,
            odd,
            sub,
            type("AsClass", (), dict(vars(odd))),
        ]

    def test_same_answers_as_pluggy(self) -> None:
        import pluggy

        from noderole import hookspecs
        from noderole.plugins import _Manager

        ours, theirs = _Manager(hookspecs.PROJECT), pluggy.PluginManager(hookspecs.PROJECT)
        checked = 0
        for namespace in self._namespaces():
            for name in dir(namespace):
                for parse in ("parse_hookimpl_opts", "parse_hookspec_opts"):
                    expected = getattr(theirs, parse)(namespace, name)
                    found = getattr(ours, parse)(namespace, name)
                    assert found is expected, (namespace, name, parse, found, expected)
                    checked += 1
        assert checked > 400

    def test_odd_module_registers_as_with_pluggy(self) -> None:
        import pluggy

        from noderole import hookspecs
        from noderole.plugins import _Manager

        hooks = []
        for manager in (_Manager(hookspecs.PROJECT), pluggy.PluginManager(hookspecs.PROJECT)):
            manager.add_hookspecs(hookspecs)
            manager.register(self._odd_module(), name="odd")
            hooks.append(
                sorted(
                    (name, impl.function.__name__, impl.tryfirst)
                    for name in dir(manager.hook)
                    if not name.startswith("_")
                    for impl in getattr(manager.hook, name).get_hookimpls()
                )
            )
        assert hooks[0] == hooks[1]
        assert ("noderole_settings", "noderole_settings", True) in hooks[0]
