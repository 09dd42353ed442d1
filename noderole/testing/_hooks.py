"""Calling one hook of one plugin in isolation, with a node context built for the test."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from typing import Any

from noderole import recordclass
from noderole.clock import Clock
from noderole.config import CONFIG_PATH, load_config
from noderole.context import NodeContext
from noderole.plugins import PluginSet
from noderole.records import did_you_mean
from noderole.root import NodeRoot
from noderole.testing._plan import PluginArg, load_test_plugins
from noderole.testing._prestart import new_fake_clock
from noderole.testing._root import RootLike, as_node_root

__all__ = ["call_hook", "node_context"]


def node_context(
    *plugins: PluginArg,
    node_root: RootLike,
    config_text: str | None = None,
    role: str | None = None,
    clock: Clock | None = None,
    builtin: bool = True,
) -> NodeContext:
    """The ``node`` hooks of ``plugins`` receive, over ``node_root``, as ``apply`` builds it.

    ``config_text`` is written to ``ROOT/etc/noderole/config.toml`` first; ``role`` is what
    ``node.role`` says (None: no role, as ``noderole services`` sees), any string: no plugin
    needs to define it. The clock is a fresh fake one unless given. Only ``plugins`` (and the
    built-in plugin) are loaded, never entry points; a bare module is named after the module
    (see :func:`call_hook`).
    """
    root = as_node_root(node_root)
    plugin_set = load_test_plugins(*plugins, builtin=builtin)
    if config_text is not None:
        local = root.resolve(CONFIG_PATH)
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(config_text, encoding="utf-8")
    return NodeContext(
        root=root,
        config=load_config(root, plugin_set.settings_tables()),
        pluginmanager=plugin_set.manager,
        clock=clock if clock is not None else new_fake_clock(),
        role=role,
        plugins=plugin_set,
    )


@contextlib.contextmanager
def _scratch(node_root: RootLike | None) -> Iterator[NodeRoot]:
    if node_root is not None:
        yield as_node_root(node_root)
        return
    with tempfile.TemporaryDirectory(prefix="noderole-root-") as scratch:
        yield NodeRoot(scratch)


def call_hook(
    plugin: PluginArg | str,
    hook_name: str,
    *,
    node: NodeContext | None = None,
    node_root: RootLike | None = None,
    config_text: str | None = None,
    role: str | None = None,
    with_plugins: tuple[PluginArg, ...] = (),
    **kwargs: Any,
) -> list[Any]:
    """Call ``plugin``'s own implementation of ``hook_name`` alone; return what it gave, as a list.

    Called as noderole calls it (under the hook timeout, a generator consumed, records stamped
    with the plugin's name in ``origin``), so a failure raises the error ``plan`` would show.
    Without ``node``, one is built with :func:`node_context` from ``plugin`` and
    ``with_plugins`` (the plugin whose hookspecs you implement, such as the k3s plugin) over
    ``node_root`` (an empty temporary root when None), ``config_text`` and ``role``. With
    ``node``, ``plugin`` is one of its plugins, or the name it was loaded under.

    The plugin's name (in ``origin`` and in error messages) is the one you give with a
    ``(name, object)`` pair; a bare module is named after the module (``__name__``, such as
    ``noderole_node_exporter.plugin``), not after the entry point ``noderole`` loads it by in
    production (``node-exporter``). Pass ``("node-exporter", plugin)`` to see what production
    shows. ``role`` is what ``node.role`` says, whatever it is: it is not checked against the
    roles the plugins define (``plan_from_plugins`` is, as ``noderole plan`` is). A
    ``hook_name`` no loaded plugin declares is a ``LookupError`` with the closest hook name.

    Example::

        (manifest,) = call_hook(("konnectivity", plugin), "noderole_k3s_manifests",
                                with_plugins=(("k3s", k3s_plugin),), node_root=node_root)
    """
    if node is not None:
        return _call(node, plugin, hook_name, kwargs)
    if isinstance(plugin, str):
        raise TypeError("call_hook: pass the plugin object (or a (name, object) pair) or node=")
    with _scratch(node_root) as root:
        built = node_context(
            plugin, *with_plugins, node_root=root, config_text=config_text, role=role
        )
        return _call(built, plugin, hook_name, kwargs)


def _call(node: NodeContext, plugin: PluginArg | str, hook_name: str, kwargs: Any) -> list[Any]:
    plugin_set = PluginSet.over(node.pluginmanager)
    manager = plugin_set.manager
    if isinstance(plugin, str):
        name: str | None = plugin
    elif isinstance(plugin, tuple):
        name = plugin[0]
    else:
        name = manager.get_name(plugin)
    if name is None or manager.get_plugin(name) is None:
        raise LookupError(
            f"call_hook: plugin {plugin!r} is not among the node's plugins "
            f"({', '.join(plugin_set.names())}); build the node with node_context(plugin, ...)"
        )
    hook = getattr(manager.hook, hook_name, None)
    impls = [] if hook is None else [i for i in hook.get_hookimpls() if i.plugin_name == name]
    if not impls and (hook is None or not hook.has_spec()):
        known = sorted(n for n, caller in vars(manager.hook).items() if caller.has_spec())
        raise LookupError(
            f"call_hook: there is no hook {hook_name!r}{did_you_mean(hook_name, known)}: no "
            f"loaded plugin declares it (hooks: {', '.join(known)}). A plugin's own hooks "
            "exist once that plugin is loaded too: pass it in with_plugins=(...)"
        )
    if not impls:
        raise LookupError(f"call_hook: plugin {name!r} does not implement {hook_name}")
    kinds = _record_kinds(hook_name)
    results: list[Any] = []
    for impl in impls:
        items = plugin_set._call(impl, name, hook_name, {"node": node, **kwargs})
        if kinds is not None:  # noderole's record hooks: checked as `plan` checks them
            expected = " or ".join(kind.__name__ for kind in kinds)
            results.extend(plugin_set._checked(items, name, hook_name, kinds, expected))
            continue
        for item in items:
            if recordclass.has(type(item)) and hasattr(item, "origin"):
                item = recordclass.evolve(item, origin=name)
            results.append(item)
    return results


def _record_kinds(hook_name: str) -> tuple[type[Any], ...] | None:
    """The records noderole's own record hook ``hook_name`` must return (None: another hook,
    whose results its caller checks: a plugin's own hooks, ``noderole_resolve_role``)."""
    from noderole.records import Service, SettingsTable
    from noderole.rehearsal_records import REHEARSAL_INPUTS

    return {
        "noderole_services": (Service,),
        "noderole_settings": (SettingsTable,),
        "noderole_standins": REHEARSAL_INPUTS,
    }.get(hook_name)
