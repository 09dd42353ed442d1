"""Plans from given plugin objects only (no entry-point scan), and assertions about them."""

from __future__ import annotations

import contextlib
import tempfile
from collections import deque
from collections.abc import Iterator
from typing import TypeAlias

from noderole.clock import Clock
from noderole.config import CONFIG_PATH
from noderole.operations import Operations
from noderole.plan import Plan
from noderole.plugins import PluginSet, load_plugins
from noderole.records import Service
from noderole.rehearsal_records import StandIn
from noderole.root import NodeRoot
from noderole.testing._prestart import new_fake_clock
from noderole.testing._root import RootLike, as_node_root

__all__ = [
    "PluginArg",
    "assert_in_plan",
    "assert_not_in_plan",
    "assert_starts_before",
    "load_test_plugins",
    "plan_from_plugins",
    "services_from_plugins",
    "standins_from_plugins",
]

PluginArg: TypeAlias = "object | tuple[str, object]"
"""A plugin object (a module or an instance with hook implementations), or a ``(name, object)``
pair to choose the name that ``Service.origin`` and error messages show.

A bare module is named after the module (its dotted ``__name__``, such as
``noderole_node_exporter.plugin``); an instance after its class. In production a plugin is named
after its entry point (``node-exporter``): pass ``("node-exporter", plugin)`` for the name
``noderole plan`` shows, ``--disable-plugin`` takes and ``Service.origin`` holds."""


def load_test_plugins(*plugins: PluginArg, builtin: bool = True) -> PluginSet:
    """A :class:`PluginSet` of the built-in plugin (unless ``builtin=False``) and ``plugins``.

    No entry point is loaded, so the installed distributions do not change the test's outcome.
    A plugin given without a name is named after its module (``__name__``, dotted) or its class,
    not after its entry point as in production: give ``(name, plugin)`` for that name.

    Its ``warnings`` are what ``noderole list`` and ``plan`` would print about the plugins as
    they load (a plugin in which no hook implementation is found, an optional ``noderole_*``
    implementation that matches no hook): ``assert load_test_plugins(plugin).warnings == []``.
    """
    return load_plugins(plugins=_named(plugins), autoload=False, builtin=builtin)


def _named(plugins: tuple[PluginArg, ...]) -> tuple[tuple[str, object], ...]:
    named: list[tuple[str, object]] = []
    for plugin in plugins:
        if isinstance(plugin, tuple) and len(plugin) == 2 and isinstance(plugin[0], str):
            named.append((plugin[0], plugin[1]))
        else:
            name = getattr(plugin, "__name__", None)
            named.append((name if isinstance(name, str) else type(plugin).__name__, plugin))
    return tuple(named)


@contextlib.contextmanager
def _root(node_root: RootLike | None) -> Iterator[NodeRoot]:
    if node_root is not None:
        yield as_node_root(node_root)
        return
    # Hooks may read files through the root; an empty scratch root stands for a bare node.
    with tempfile.TemporaryDirectory(prefix="noderole-root-") as scratch:
        yield NodeRoot(scratch)


def services_from_plugins(
    *plugins: PluginArg,
    config_text: str | None = None,
    node_root: RootLike | None = None,
    clock: Clock | None = None,
    builtin: bool = True,
    role: str | None = None,
) -> list[Service]:
    """Every service ``plugins`` (and the built-in plugin) contribute, as ``apply`` would see them.

    ``config_text`` is written to ``ROOT/etc/noderole/config.toml`` first (the settings file);
    without ``node_root`` an empty temporary root is used and removed afterwards. The hooks see
    ``node.role == role`` (None: no role in question, as ``noderole list`` asks).
    """
    with _operations(plugins, config_text, node_root, clock, builtin) as ops:
        return ops.services(role)


def standins_from_plugins(
    *plugins: PluginArg,
    config_text: str | None = None,
    node_root: RootLike | None = None,
    clock: Clock | None = None,
    builtin: bool = True,
    role: str | None = None,
) -> list[StandIn]:
    """Every stand-in ``plugins`` supply for rehearsals (``noderole_standins``), origin stamped.

    The hooks see the same node as :func:`services_from_plugins` gives (``config_text`` written
    first). Put one where ``noderole rehearse`` would with
    ``node_root.write(s.path, s.content, mode=s.mode)``.
    """
    with _operations(plugins, config_text, node_root, clock, builtin) as ops:
        return ops.standins(role)


def plan_from_plugins(
    role: str,
    *plugins: PluginArg,
    config_text: str | None = None,
    node_root: RootLike | None = None,
    clock: Clock | None = None,
    builtin: bool = True,
) -> Plan:
    """The :class:`~noderole.plan.Plan` for ``role`` from ``plugins`` alone (plus the built-in
    plugin, which provides ``net`` and ``cgroups``), as ``noderole plan ROLE`` makes it: the
    hooks see ``node.role == role``.

    Raises what ``noderole plan`` would: :class:`~noderole.errors.PlanError` for an unknown role,
    a missing need or a cycle, :class:`~noderole.errors.ConfigError` for a bad ``config_text``,
    :class:`~noderole.errors.PluginError` for a misbehaving hook.

    Each plugin given as a bare module is named after the module (``origin`` is
    ``"noderole_node_exporter.plugin"``); ``noderole plan`` names it after its entry point. Give
    ``("node-exporter", plugin)`` to test with the production name.
    """
    with _operations(plugins, config_text, node_root, clock, builtin) as ops:
        return ops.plan(role)


@contextlib.contextmanager
def _operations(
    plugins: tuple[PluginArg, ...],
    config_text: str | None,
    node_root: RootLike | None,
    clock: Clock | None,
    builtin: bool,
) -> Iterator[Operations]:
    """The operations ``noderole`` would use over the root (``config_text`` written first), with
    ``plugins`` only: no entry point is loaded."""
    with _root(node_root) as root:
        if config_text is not None:
            local = root.resolve(CONFIG_PATH)
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(config_text, encoding="utf-8")
        yield Operations(
            root=root,
            plugin_objects=_named(plugins),
            clock=clock if clock is not None else new_fake_clock(),
            autoload=False,
            builtin=builtin,
        )


def _transitive_after(plan: Plan, name: str) -> set[str]:
    """Every service ``name`` waits for, directly or through others."""
    seen: set[str] = set()
    queue = deque(plan[name].after)
    while queue:
        other = queue.popleft()
        if other not in seen:
            seen.add(other)
            queue.extend(plan[other].after)
    return seen


def assert_in_plan(plan: Plan, *names: str) -> None:
    """Fail unless every one of ``names`` is in ``plan``."""
    missing = [name for name in names if name not in plan]
    if missing:
        raise AssertionError(
            f"{', '.join(missing)} not in the plan for role {plan.role!r} "
            f"(planned: {', '.join(plan.names()) or 'nothing'})"
        )


def assert_not_in_plan(plan: Plan, *names: str) -> None:
    """Fail if any of ``names`` is in ``plan``, naming who pulled it in."""
    present = [name for name in names if name in plan]
    if present:
        why = []
        for name in present:
            by = plan[name].pulled_in_by
            why.append(f"{name} ({'pulled in by ' + by if by else 'in the role'})")
        raise AssertionError(f"expected not in the plan for role {plan.role!r}: {', '.join(why)}")


def assert_starts_before(plan: Plan, first: str, *then: str) -> None:
    """Fail unless each service in ``then`` waits for ``first`` (directly or transitively).

    A lower wave alone is not enough: two independent services may land in different waves by
    chance, and apply does not make one wait for the other.
    """
    assert_in_plan(plan, first, *then)
    for name in then:
        if first not in _transitive_after(plan, name):
            after = ", ".join(plan[name].after) or "nothing"
            raise AssertionError(
                f"expected {first} to start before {name}, but {name} does not wait for it "
                f"({name} starts after: {after}); declare need/want/use/after on {name}, or "
                f"before on {first}"
            )
