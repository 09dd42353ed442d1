"""Loading plugins and collecting the records their hooks return.

One :class:`PluginSet` is built per invocation (no module-level manager): the built-in plugin
first, then every entry point of the group ``noderole``, minus the disabled ones. Entry points are
filtered *before* they are imported, so ``--disable-plugin broken`` gets a node past a plugin that
no longer imports.

Hooks that return records are called one plugin at a time, each bounded by the hook timeout in a
worker thread (all of a hook's plugins handed to it at once: :mod:`noderole.bounded`), so a
failure — an exception, a generator that raises later, a wrong type, a hang — is reported naming
the plugin, its distribution and the hook. Importing an entry point is bounded the same way;
``SystemExit`` (or any other ``BaseException``) raised by plugin code, at import or in a hook, is
a :class:`~noderole.errors.PluginError` like any other failure, never an exit of noderole.
"""

from __future__ import annotations

import itertools
import os
import types
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

import pluggy

from noderole import hookspecs, recordclass
from noderole.bounded import Entry, Late, run_bounded, run_bounded_each
from noderole.entrypoints import FoundEntryPoint, discover
from noderole.errors import ConfigError, DefinitionError, NoderoleError, PluginError, UsageError
from noderole.records import RecordBase, Service, SettingsTable

__all__ = [
    "AUTOLOAD_ENV",
    "HOOK_TIMEOUT_ENV",
    "PLUGIN_GROUP",
    "PluginInfo",
    "PluginSet",
    "load_plugins",
    "resolve_role",
]

PLUGIN_GROUP = "noderole"
"""Entry-point group third-party plugins register in."""
AUTOLOAD_ENV = "NODEROLE_DISABLE_PLUGIN_AUTOLOAD"
"""Set to 1 to load no entry-point plugin (only the built-in one and those passed explicitly)."""
HOOK_TIMEOUT_ENV = "NODEROLE_HOOK_TIMEOUT"
"""Seconds a single plugin hook call may take before it is reported as hung (default 60)."""
DEFAULT_HOOK_TIMEOUT = 60.0
RESERVED_TABLE = "noderole"
"""The settings table of noderole's own settings (the built-in plugin's): no other plugin's."""

R = TypeVar("R")

# The PluginSet each manager was loaded into, so a NodeContext built from a bare manager calls
# hooks with the same descriptions and timeout as the core.
_SETS: weakref.WeakKeyDictionary[pluggy.PluginManager, PluginSet] = weakref.WeakKeyDictionary()


@recordclass.frozen(kw_only=True, repr=False, eq=False)
class PluginInfo(RecordBase):
    """Where a loaded plugin came from."""

    name: str
    """Plugin name: the entry-point name (``builtin`` for noderole's own)."""
    module: str
    """Module (or object) that holds its hook implementations."""
    distribution: str | None = None
    """Distribution that declared the entry point."""
    version: str | None = None
    """That distribution's version."""
    entry_point: str | None = None
    """``name = module:attr`` as declared."""

    def describe(self) -> str:
        """``plugin 'x' (entry point 'x = m' from distribution 'd 1.0')`` for error messages."""
        parts = [f"plugin {self.name!r}"]
        if self.entry_point:
            origin = f"entry point {self.entry_point!r}"
            if self.distribution:
                origin += f" from distribution {self.distribution!r}"
                if self.version:
                    origin += f" {self.version}"
            parts.append(f"({origin})")
        return " ".join(parts)


class PluginSet:
    """The plugins of one invocation and the records they contribute."""

    def __init__(
        self, manager: pluggy.PluginManager, infos: Sequence[PluginInfo], *, hook_timeout: float
    ) -> None:
        self.manager = manager
        """The pluggy manager (plugins' own hookspecs are reachable as ``manager.hook.NAME``)."""
        self.infos: tuple[PluginInfo, ...] = tuple(infos)
        """Loaded plugins in load order."""
        self.hook_timeout = hook_timeout
        """Seconds one hook call may take."""
        self._by_name = {info.name: info for info in self.infos}
        self.warnings: list[str] = []
        """What looks like a plugin author's mistake without keeping the plugins from loading
        (a plugin that implements no hook, an optional hook of a name nothing declares): the
        command line prints each on stderr, once."""

    @classmethod
    def over(cls, manager: pluggy.PluginManager) -> PluginSet:
        """The set ``manager`` was loaded into by :func:`load_plugins`, or a bare one over it."""
        known = _SETS.get(manager)
        if known is not None:
            return known
        infos = [PluginInfo(name=name, module=name) for name, _ in manager.list_name_plugin()]
        return cls(manager, infos, hook_timeout=_hook_timeout())

    def names(self) -> list[str]:
        """Names of the loaded plugins, in load order."""
        return [info.name for info in self.infos]

    def info(self, name: str) -> PluginInfo:
        """The :class:`PluginInfo` of a loaded plugin."""
        return self._by_name[name]

    # ---------------------------------------------------------------- record hooks

    def settings_tables(self) -> list[SettingsTable]:
        """Every plugin's settings tables, sorted by name; a table declared twice is an error."""
        tables = self.collect("noderole_settings", SettingsTable, {})
        seen: dict[str, SettingsTable] = {}
        for table in tables:
            if table.table == RESERVED_TABLE and table.origin != "builtin":
                raise PluginError(
                    f"{self._describe(table.origin)} hook noderole_settings declares the settings "
                    f"table [{RESERVED_TABLE}], which is reserved for noderole's own settings: "
                    "rename the plugin's table (usually after the plugin, such as "
                    f"[{table.origin}]) and read it with node.settings() under that name"
                )
            other = seen.get(table.table)
            if other is not None:
                raise PluginError(
                    f"settings table [{table.table}] is declared by both plugin {other.origin!r} "
                    f"and plugin {table.origin!r}; disable one with --disable-plugin NAME"
                )
            seen[table.table] = table
        return [seen[name] for name in sorted(seen)]

    def services(
        self, node: Any, *, broken: dict[str, NoderoleError] | None = None
    ) -> list[Service]:
        """Every service every plugin contributes (duplicates are the plan's to report).

        With ``broken``, a plugin whose hook fails is recorded there and skipped (``apply``: one
        broken plugin fails its own services, not the whole role).
        """
        return self.collect_any("noderole_services", (Service,), {"node": node}, broken=broken)

    def standins(self, node: Any) -> list[Any]:
        """Every rehearsal record plugins supply: stand-in programs, input files, settings."""

        from noderole.rehearsal_records import REHEARSAL_INPUTS

        return self.collect_any("noderole_standins", REHEARSAL_INPUTS, {"node": node})

    def collect(self, hook_name: str, kind: type[R], kwargs: Mapping[str, Any]) -> list[R]:
        """Call ``hook_name`` on each plugin, check every item is a ``kind``, stamp its origin."""
        return self.collect_any(hook_name, (kind,), kwargs)

    def collect_any(
        self,
        hook_name: str,
        kinds: tuple[type[Any], ...],
        kwargs: Mapping[str, Any],
        *,
        broken: dict[str, NoderoleError] | None = None,
    ) -> list[Any]:
        """:meth:`collect` for a hook that returns records of several ``kinds``.

        With ``broken`` (a dict), a plugin whose hook fails does not fail the call: its error is
        stored under its name, none of its records are returned, and the other plugins' are.
        """
        hook = getattr(self.manager.hook, hook_name, None)
        if hook is None:
            raise PluginError(
                f"no hook named {hook_name!r}: a plugin's own hooks exist only once it added "
                "them with noderole_addhooks; check the spelling and that the plugin is loaded"
            )
        expected = " or ".join(kind.__name__ for kind in kinds)
        records: list[Any] = []
        # Plugins whose calls go to the worker together: one hand-over for all of them.
        pending: list[tuple[Any, str]] = []

        def settle() -> None:
            while pending:
                stop = None if broken is not None else _failed(kinds)
                calls = [
                    (self._bind(impl, kwargs), f"{name}:{hook_name}") for impl, name in pending
                ]
                outcomes = run_bounded_each(calls, timeout=self.hook_timeout, stop=stop)
                ran = pending[: len(outcomes)]
                del pending[: len(outcomes)]
                for (_, name), outcome in zip(ran, outcomes, strict=True):
                    try:
                        items = self._items(outcome, name, hook_name, kwargs)
                        records.extend(self._checked(items, name, hook_name, kinds, expected))
                    except NoderoleError as exc:
                        if broken is None:
                            raise
                        broken[name] = exc

        for impl in hook.get_hookimpls():
            plugin = self.manager.get_name(impl.plugin) or repr(impl.plugin)
            if impl.hookwrapper or impl.wrapper:
                # Record hooks are called one plugin at a time: a wrapper would never run.
                settle()
                kind = "wrapper" if impl.wrapper else "hookwrapper"
                error = PluginError(
                    f"{self._describe(plugin)} implements {hook_name} as a wrapper "
                    f"({kind}=True), which noderole never calls: it calls a record hook one "
                    "plugin at a time, so that a failure names its plugin; make it a plain "
                    "@noderole.hookimpl returning records"
                )
                if broken is None:
                    raise error
                broken[plugin] = error
                continue
            try:
                self._check_arguments(impl, plugin, hook_name, kwargs)
            except NoderoleError as exc:
                settle()  # the plugins before it come first, their errors too
                if broken is None:
                    raise
                broken[plugin] = exc
                continue
            pending.append((impl, plugin))
        settle()
        return records

    def _checked(
        self,
        items: list[Any],
        plugin: str,
        hook_name: str,
        kinds: tuple[type[Any], ...],
        expected: str,
    ) -> list[Any]:
        """One plugin's records from ``hook_name``, type-checked and stamped with its name."""
        records: list[Any] = []
        for item in items:
            if not isinstance(item, kinds):
                shown = f"{item!r} ({type(item).__name__})"
                if len(items) > 1 or item is None:
                    shown = f"a list holding {shown}"
                if isinstance(item, list | tuple | set | frozenset | types.GeneratorType):
                    # [[Service(...)]]: the inner list shown alone read as an allowed answer.
                    raise PluginError(
                        f"{self._describe(plugin)} hook {hook_name} returned a list holding a "
                        f"{type(item).__name__} ({_cut(repr(item))}): a list inside the list is "
                        f"not accepted; return {expected} records in one flat list ([a, b], or "
                        f"[*first, *second] to join lists). Fix the plugin, or disable it with "
                        f"--disable-plugin {plugin}"
                    )
                raise PluginError(
                    f"{self._describe(plugin)} hook {hook_name} returned {shown}; it must "
                    f"return {expected} records (a single one, a list of them, or None). Fix "
                    f"the plugin, or disable it with --disable-plugin {plugin}"
                )
            if recordclass.has(type(item)) and hasattr(item, "origin"):
                item = recordclass.evolve(item, origin=plugin)
            records.append(item)
        return records

    def _describe(self, plugin: str) -> str:
        info = self._by_name.get(plugin)
        return info.describe() if info else f"plugin {plugin!r}"

    def _call(self, impl: Any, plugin: str, hook_name: str, kwargs: Mapping[str, Any]) -> list[Any]:
        """One plugin's hook, called alone in the worker: what it returned, as a list."""
        self._check_arguments(impl, plugin, hook_name, kwargs)
        # A worker thread bounds the call: a hook that hangs (a blocking read at plan time) must
        # not hang the boot; a hung hook is left behind in its daemon thread.
        outcome = run_bounded(
            self._bind(impl, kwargs), name=f"{plugin}:{hook_name}", timeout=self.hook_timeout
        )
        return self._items(outcome, plugin, hook_name, kwargs)

    def _check_arguments(
        self, impl: Any, plugin: str, hook_name: str, kwargs: Mapping[str, Any]
    ) -> None:
        missing = [name for name in impl.argnames if name not in kwargs]
        if missing:
            raise PluginError(
                f"{self._describe(plugin)} hook {hook_name} takes {', '.join(missing)}, which "
                f"the caller did not pass (it passed {', '.join(sorted(kwargs)) or 'nothing'})"
            )

    @staticmethod
    def _bind(impl: Any, kwargs: Mapping[str, Any]) -> Callable[[], list[Any]]:
        """The call of ``impl`` with its arguments from ``kwargs``, its result as a list."""
        args = [kwargs[name] for name in impl.argnames]
        return lambda: _flatten(impl.function(*args))

    def _innermost_hook(self, running: Sequence[str]) -> tuple[str, str] | None:
        """The innermost hook call among ``running`` (the names this set gives its calls,
        ``plugin:hook``) that a loaded plugin made, as (plugin, hook); None if there is none."""
        for name in reversed(running[1:]):
            plugin, _, hook = name.rpartition(":")
            if hook.isidentifier() and plugin in self._by_name:
                return plugin, hook
        return None

    def _items(
        self, outcome: Entry, plugin: str, hook_name: str, kwargs: Mapping[str, Any]
    ) -> list[Any]:
        """What a bounded hook call returned, or its failure as the error that names the plugin."""
        if isinstance(outcome, Late):
            late = TimeoutError(f"hook {hook_name} did not return within {self.hook_timeout:g}s")
            inner = self._innermost_hook(outcome.running)
            if inner is not None and inner[0] != plugin:
                culprit, called = inner
                raise PluginError(
                    f"{self._describe(plugin)} {late.args[0]}: it was waiting on "
                    f"{self._describe(culprit)} hook {called}, which it called and which is "
                    f"probably blocked on something. Fix that plugin, raise the limit with "
                    f"{HOOK_TIMEOUT_ENV}=SECONDS, or disable it with --disable-plugin {culprit}"
                ) from late
            raise PluginError(
                f"{self._describe(plugin)} {late.args[0]}; it is probably blocked on something. "
                f"Fix the plugin, raise the limit with {HOOK_TIMEOUT_ENV}=SECONDS, or disable it "
                f"with --disable-plugin {plugin}"
            ) from late
        error = outcome.error
        if error is None:
            items: list[Any] = outcome.value
            return items
        if isinstance(error, DefinitionError):
            # A value from config.toml that the plugin's record refuses is the operator's to fix.
            config = getattr(kwargs.get("node"), "config", None)
            blamed = config.blame(error) if config is not None else None
            if blamed is not None:
                raise blamed from error
            raise DefinitionError(f"{self._describe(plugin)} hook {hook_name}: {error}") from error
        if isinstance(error, ConfigError):
            # It names the file, table and key to fix (its contract): the plugin whose hook was
            # running is no part of the fix, and not always the one whose setting it is (the k3s
            # plugin's hook gathers what other plugins contribute to k3s).
            raise error
        if isinstance(error, NoderoleError):
            # Keep the class (and so the exit code) but say where it came from.
            raise type(error)(f"{self._describe(plugin)} hook {hook_name}: {error}") from error
        raise PluginError(
            f"{self._describe(plugin)} hook {hook_name} raised "
            f"{type(error).__name__}: {error}. Run with --debug for the traceback, fix the "
            f"plugin, or disable it with --disable-plugin {plugin}"
        ) from error


def _failed(kinds: tuple[type[Any], ...]) -> Callable[[Entry], bool]:
    """Whether a hook's outcome is a failure (late, raised, or a wrong type among its items):
    where the first failure ends the call, no plugin after it is called."""

    def failed(outcome: Entry) -> bool:
        if isinstance(outcome, Late) or outcome.error is not None:
            return True
        return not all(isinstance(item, kinds) for item in outcome.value)

    return failed


def _flatten(result: Any) -> list[Any]:
    """None → [], one record → [it], any iterable (a generator too: consumed here) → list."""
    if result is None:
        return []
    if recordclass.has(type(result)) or isinstance(result, str | bytes | Mapping):
        return [result]  # a mapping's keys are no records: the error names the mapping
    if isinstance(result, Iterable):
        return list(result)
    return [result]


def _cut(text: str, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters for a message."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(exc: BaseException) -> str:
    """pluggy's messages span lines; ours are one paragraph."""
    return " ".join(str(exc).split())


def _hook_timeout() -> float:
    raw = os.environ.get(HOOK_TIMEOUT_ENV)
    if not raw:
        return DEFAULT_HOOK_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise PluginError(f"{HOOK_TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):  # NaN compares false both ways: refused too
        raise PluginError(
            f"{HOOK_TIMEOUT_ENV}={raw!r} must be a finite number of seconds greater than 0"
        )
    return value


def _autoload_disabled() -> bool:
    return os.environ.get(AUTOLOAD_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


class _Manager(pluggy.PluginManager):
    """pluggy's manager, finding hooks in a module without ``inspect.getattr_static``.

    Registering a module makes pluggy look at every name it holds (its imports and constants
    too: the shipped plugins hold about 200) through ``inspect.getattr_static``, which costs more
    than the rest of loading the plugins. In a plain module, a name that is not one of the
    module type's data descriptors is simply the module's ``__dict__`` entry: read there, a
    value that is no function, method, staticmethod or classmethod is no hook, and a function's
    marker is its attribute. Anything else (a class or an instance as plugin, a module whose
    ``__dir__`` lists names it does not hold) is pluggy's own lookup, unchanged. The answers are
    pluggy's, name for name (tests/test_plugins.py compares them).
    """

    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        found = _module_marker(plugin, name, self.project_name + "_impl")
        if found is _DEFER:
            return super().parse_hookimpl_opts(plugin, name)
        return cast("pluggy.HookimplOpts | None", found)

    def parse_hookspec_opts(self, module_or_class: Any, name: str) -> pluggy.HookspecOpts | None:
        found = _module_marker(module_or_class, name, self.project_name + "_spec")
        if found is _DEFER:
            return super().parse_hookspec_opts(module_or_class, name)
        return cast("pluggy.HookspecOpts | None", found)


_DEFER: Any = object()
# The data descriptors of the module type (and object): pluggy's static lookup finds these
# before the module's own dict, so they are left to it.
_MODULE_DESCRIPTORS = frozenset({"__dict__", "__annotations__", "__class__"})
_HOOKABLE = (types.FunctionType, types.MethodType, staticmethod, classmethod)


def _module_marker(namespace: object, name: str, marker: str) -> object:
    """The marker options of ``namespace.name`` when ``namespace`` is a plain module: a dict,
    None (not a hook), or ``_DEFER`` (ask pluggy)."""
    if type(namespace) is not types.ModuleType or name in _MODULE_DESCRIPTORS:
        return _DEFER
    value = namespace.__dict__.get(name, _DEFER)
    if value is _DEFER:
        return _DEFER
    if not isinstance(value, _HOOKABLE):
        return None
    if type(value) is not types.FunctionType:
        return _DEFER  # a method, staticmethod or classmethod in a module: rare, pluggy's way
    opts = getattr(value, marker, None)
    if opts is not None:
        return opts if isinstance(opts, dict) else None
    # pluggy also reads the marker of a ``__func__`` the holder has; a function has one only
    # when someone set it.
    return _DEFER if "__func__" in value.__dict__ else None


def load_plugins(
    *,
    disabled: Iterable[str] = (),
    autoload: bool | None = None,
    plugins: Sequence[tuple[str, object]] = (),
    builtin: bool = True,
    hook_timeout: float | None = None,
    entry_point_cache: str | os.PathLike[str] | None = None,
) -> PluginSet:
    """Build this invocation's plugin manager and register plugins.

    Order: the built-in plugin (unless ``builtin=False``), then ``plugins`` (name, object) pairs
    given explicitly (tests, the plugin-author kit), then entry points of the ``noderole`` group
    unless ``autoload`` is False (default: on, unless ``NODEROLE_DISABLE_PLUGIN_AUTOLOAD=1``).
    ``disabled`` names are skipped before import. ``entry_point_cache`` is the file that keeps
    entry-point discovery between invocations (:mod:`noderole.entrypoints`); None scans.
    """
    skip = set(disabled)
    if autoload is None:
        autoload = not _autoload_disabled()
    timeout = hook_timeout if hook_timeout is not None else _hook_timeout()
    found = _entry_points(entry_point_cache) if autoload else []
    known = {"builtin"} if builtin else set()
    known |= {name for name, _ in plugins} | {entry_point.name for entry_point in found}
    unknown = [name for name in skip if name not in known]
    if unknown:  # a typo would otherwise disable nothing, silently (checked before any import)
        raise UsageError(
            f"--disable-plugin {', '.join(sorted(unknown))}: no such plugin is installed "
            f"(installed: {', '.join(sorted(known)) or 'none'}; noderole list shows them)"
        )
    _refuse_shared_names(found, skip)
    manager = _Manager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    # Historic: every plugin registered from now on gets the call, so plugins can add hookspecs
    # that later plugins implement, whatever the registration order.
    manager.hook.noderole_addhooks.call_historic(kwargs={"pluginmanager": manager})
    infos: list[PluginInfo] = []
    objects: list[object] = []

    def register(obj: object, info: PluginInfo) -> None:
        try:
            manager.register(obj, name=info.name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(
                f"{info.describe()} cannot be registered: {_one_line(exc)}."
                f"{_argument_hint(manager, exc)} Check the hook's argument names against the "
                "hook reference (docs/reference/hooks.md), or disable it with "
                f"--disable-plugin {info.name}"
            ) from exc
        except ValueError as exc:  # duplicate name or object
            raise PluginError(f"{info.describe()} cannot be registered: {exc}") from exc
        except (Exception, SystemExit) as exc:  # its noderole_addhooks, called as it registers
            raise PluginError(
                f"{info.describe()} failed while registering (in its noderole_addhooks): "
                f"{_exception_line(exc)}. Fix the plugin, or disable it with "
                f"--disable-plugin {info.name}"
            ) from exc
        infos.append(info)
        objects.append(obj)

    if builtin and "builtin" not in skip:
        from noderole import builtin as builtin_module

        register(builtin_module, PluginInfo(name="builtin", module="noderole.builtin"))
    for name, obj in plugins:
        if name not in skip:
            module = getattr(obj, "__name__", type(obj).__name__)
            register(obj, PluginInfo(name=name, module=module))
    wanted = [entry_point for entry_point in found if entry_point.name not in skip]
    for info, obj in _import_all(wanted, timeout):
        register(obj, info)
    try:
        manager.check_pending()
    except pluggy.PluginValidationError as exc:
        name = manager.get_name(exc.plugin) or repr(exc.plugin)
        described = next((i.describe() for i in infos if i.name == name), f"plugin {name!r}")
        raise PluginError(
            f"{described} implements a hook that does not exist: {_one_line(exc)}"
            f"{_unknown_hook_hint(manager, exc.plugin)}. Check the spelling against the hook "
            "reference; a hook of another plugin that may be absent must be marked "
            "@noderole.hookimpl(optionalhook=True)"
        ) from exc
    plugin_set = PluginSet(manager, infos, hook_timeout=timeout)
    plugin_set.warnings = _load_warnings(manager, infos, objects)
    _SETS[manager] = plugin_set
    return plugin_set


def _refuse_shared_names(found: Sequence[FoundEntryPoint], skip: Collection[str]) -> None:
    """Two distributions declaring one entry-point name: a :class:`PluginError` naming both.

    Only one of them could be loaded under the name, and which one would depend on the order
    of ``sys.path``; its services would vanish without a word. ``found`` is sorted by name, so
    a pair is two neighbours; a name given to ``--disable-plugin`` skips both.
    """
    for first, second in itertools.pairwise(found):
        if first.name == second.name and first.name not in skip:
            from noderole.pluginhints import shared_name

            raise PluginError(shared_name([ep for ep in found if ep.name == first.name]))


def _load_warnings(
    manager: pluggy.PluginManager, infos: Sequence[PluginInfo], objects: Sequence[object]
) -> list[str]:
    """What looks like a mistake in the plugins just loaded, though none keeps them from
    loading: a plugin that implements no hook at all, and an implementation named like one of
    noderole's hooks (``noderole_*``, marked ``optionalhook``) that matches no hook declared.

    One pass over the hooks, which are few: the messages are only built when there is one.
    """
    implementing: set[int] = set()
    strays: list[tuple[str, Any]] = []
    for name, caller in vars(manager.hook).items():
        impls = caller.get_hookimpls()
        implementing.update(id(impl.plugin) for impl in impls)
        if impls and not caller.has_spec() and name.startswith("noderole_"):
            strays.append((name, impls))
    warnings = [
        _implements_nothing(info, obj)
        for info, obj in zip(infos, objects, strict=True)
        if id(obj) not in implementing
    ]
    if strays:
        from noderole.pluginhints import stray_hooks

        warnings.extend(stray_hooks(manager, infos, strays))
    return warnings


def _implements_nothing(info: PluginInfo, obj: object) -> str:
    from noderole.pluginhints import implements_nothing

    return implements_nothing(info, obj)


def _argument_hint(manager: pluggy.PluginManager, exc: pluggy.PluginValidationError) -> str:
    from noderole.pluginhints import argument_hint

    return argument_hint(manager, exc)


def _unknown_hook_hint(manager: pluggy.PluginManager, plugin: object) -> str:
    from noderole.pluginhints import unknown_hook_hint

    return unknown_hook_hint(manager, plugin)


def resolve_role(plugins: PluginSet, node: Any) -> str | None:
    """The role the plugins resolve for this node (``noderole_resolve_role``), or None.

    Every plugin is asked, one at a time and bounded by the hook timeout; the first answer that
    is not None wins. Two plugins giving different answers is an error naming both, so a role
    never depends on the order plugins were loaded in. A non-string answer is an error naming the
    plugin.
    """
    answers: list[tuple[str, str]] = []
    hook = plugins.manager.hook.noderole_resolve_role
    for impl in hook.get_hookimpls():
        if impl.hookwrapper or impl.wrapper:
            continue
        plugin = plugins.manager.get_name(impl.plugin) or repr(impl.plugin)
        for role in plugins._call(impl, plugin, "noderole_resolve_role", {"node": node}):
            if not isinstance(role, str) or not role:
                raise PluginError(
                    f"{plugins._describe(plugin)} hook noderole_resolve_role returned "
                    f"{role!r}; it must return a role name (a string) or None"
                )
            answers.append((plugin, role))
    if not answers:
        return None
    first_plugin, first = answers[0]
    for plugin, role in answers[1:]:
        if role != first:
            raise PluginError(
                f"plugins disagree on this node's role: {plugins._describe(first_plugin)} "
                f"resolves {first!r}, {plugins._describe(plugin)} resolves {role!r}; fix the "
                "inputs they read, pass the role explicitly, or disable one with "
                "--disable-plugin NAME"
            )
    return first


def _import_all(
    entry_points: Sequence[FoundEntryPoint], timeout: float
) -> Iterator[tuple[PluginInfo, Any]]:
    """Import each of ``entry_points`` in a worker thread, each bounded by ``timeout`` seconds
    from its own start, in order; yield each one's info and the object it names.

    A plugin that blocks at import (a network call, a lock) must not hang every command. Python
    cannot stop a thread: a hung import stays blocked in its daemon thread until this process
    exits, holding that module's import lock, and nothing waits for it. ``SystemExit`` and the
    other ``BaseException``s raised by the plugin's code are caught in the worker, so they are
    reported as this plugin's error; a real Ctrl-C still interrupts the wait in the main thread.

    The imports go to the worker at once (one hand-over, not one each); the first that fails or
    is late is raised as this plugin's :class:`PluginError` after the plugins before it are
    yielded, and the plugins after it are not imported, as when each was handed over alone.
    """
    infos = [_info(entry_point) for entry_point in entry_points]
    calls = [(ep.load, f"import {ep.name}") for ep in entry_points]
    # Stopped at the first failure: fewer outcomes than plugins, each one's error raised below.
    outcomes = run_bounded_each(calls, timeout=timeout, stop=_failed_import)
    for info, outcome in zip(infos, outcomes, strict=False):
        yield info, _imported(outcome, info, timeout)


def _failed_import(outcome: Entry) -> bool:
    return isinstance(outcome, Late) or outcome.error is not None


def _imported(outcome: Entry, info: PluginInfo, timeout: float) -> Any:
    """The object an import gave, or the :class:`PluginError` that names how it failed."""
    if isinstance(outcome, Late):
        raise PluginError(
            f"{info.describe()} did not finish importing within {timeout:g}s; it is probably "
            f"blocked on something at import. Fix the plugin, raise the limit with "
            f"{HOOK_TIMEOUT_ENV}=SECONDS, or skip it with --disable-plugin {info.name} (its "
            "import stays blocked in the background until noderole exits)"
        )
    error = outcome.error
    if error is not None:
        raise PluginError(
            f"{info.describe()} failed to import: {_exception_line(error)}. "
            f"Reinstall or fix the distribution, or skip it with "
            f"--disable-plugin {info.name} (or {AUTOLOAD_ENV}=1 to load no plugins)"
        ) from error
    return outcome.value


def _exception_line(exc: BaseException) -> str:
    """``Type: message``, the last line of a traceback (``SystemExit: 0``)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _entry_points(cache: str | os.PathLike[str] | None = None) -> list[FoundEntryPoint]:
    # Sorted by name: load order never depends on the order distributions were installed in.
    return discover(PLUGIN_GROUP, cache)


def _info(entry_point: FoundEntryPoint) -> PluginInfo:
    return PluginInfo(
        name=entry_point.name,
        module=entry_point.value,
        distribution=entry_point.distribution,
        version=entry_point.version,
        entry_point=f"{entry_point.name} = {entry_point.value}",
    )
