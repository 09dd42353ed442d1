"""What a plugin's author got wrong, said with the fix: the messages :mod:`noderole.plugins`
builds only when something is wrong (imported then, never on a command's usual path)."""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

from noderole.records import closest, did_you_mean

if TYPE_CHECKING:
    from noderole.entrypoints import FoundEntryPoint

__all__ = [
    "Plugin",
    "argument_hint",
    "implements_nothing",
    "known_hooks",
    "shared_name",
    "stray_hooks",
    "unknown_hook_hint",
]


class Plugin(Protocol):
    """What a message says of a plugin (:class:`noderole.plugins.PluginInfo` has it; named
    here by its shape, so that this module, which plugins imports, imports nothing of it)."""

    @property
    def name(self) -> str: ...
    @property
    def entry_point(self) -> str | None: ...
    def describe(self) -> str: ...


def shared_name(same: Sequence[FoundEntryPoint]) -> str:
    """Why two distributions (or more) declaring one entry-point name are refused, and the fix."""
    name = same[0].name

    def where(ep: FoundEntryPoint) -> str:
        dist = repr(ep.distribution) if ep.distribution else "an unnamed distribution"
        version = f" {ep.version}" if ep.version else ""
        path = f" at {ep.path}" if ep.path else ""
        return f"entry point '{ep.name} = {ep.value}' of distribution {dist}{version}{path}"

    dists = [ep.distribution for ep in same if ep.distribution]
    return (
        f"plugin name {name!r} is declared by {len(same)} distributions: "
        f"{'; '.join(map(where, same))}. Only one plugin can have a name, and which one "
        f"would load depends on the order of sys.path. Uninstall one of them "
        f"(pip uninstall {dists[-1] if dists else 'DISTRIBUTION'}), or rename the entry "
        f"point of one in its [project.entry-points.noderole] table; --disable-plugin "
        f"{name} skips them all"
    )


def argument_hint(manager: pluggy.PluginManager, exc: pluggy.PluginValidationError) -> str:
    """`` noderole_services takes: node (...)``: the arguments a hook has, when pluggy refused an
    implementation for an argument the hook does not have; else ``""`` (the error path only)."""
    import re

    text = str(exc)
    hook = re.search(r"for hook '([^']+)'", text)
    caller = getattr(manager.hook, hook.group(1), None) if hook else None
    spec = getattr(caller, "spec", None)
    if hook is None or spec is None:
        return ""
    names = [*spec.argnames, *spec.kwargnames]
    given = re.search(r"Argument\(s\) \{(.*?)\}", text)
    wrong = re.findall(r"'([^']+)'", given.group(1)) if given else []
    hint = f" The arguments of {hook.group(1)} are: {', '.join(names) or 'none'}"
    close = [f"{name!r}{did_you_mean(name, names)}" for name in sorted(wrong)]
    if close:
        hint += f" (an implementation takes any of them), not {', '.join(close)}"
    return hint + "."


def known_hooks(manager: pluggy.PluginManager) -> list[str]:
    return [name for name, caller in vars(manager.hook).items() if caller.has_spec()]


def unknown_hook_hint(manager: pluggy.PluginManager, plugin: object) -> str:
    """`` (did you mean 'noderole_services'?)`` for the hook ``plugin`` implements that no spec
    declares (pluggy's message names it), or ``""``."""
    known = known_hooks(manager)
    for name, caller in vars(manager.hook).items():
        if caller.has_spec() or name.startswith("_"):
            continue
        if any(impl.plugin is plugin and not impl.optionalhook for impl in caller.get_hookimpls()):
            return did_you_mean(name, known)
    return ""


def implements_nothing(info: Plugin, obj: object) -> str:
    """The warning for a plugin that registered no hook implementation, with the likely fix."""
    text = f"{info.describe()} implements no hook, so it contributes nothing: "
    if isinstance(obj, types.FunctionType | types.BuiltinFunctionType | types.MethodType):
        entry = f"its entry point ({info.entry_point})" if info.entry_point else "it"
        return text + (
            f"{entry} names the function {obj.__name__!r}, not a module; noderole looks for "
            "hook implementations in the object the entry point names: point the entry point "
            "at the module that holds them (name = package.module)"
        )
    unmarked: list[str] = []
    foreign: list[str] = []
    for name in dir(obj):
        if not name.startswith("noderole_"):
            continue
        value = getattr(obj, name, None)
        if not callable(value):
            continue
        markers = [
            attr
            for attr in dir(value)
            if attr.endswith("_impl") and isinstance(getattr(value, attr, None), dict)
        ]
        if markers:
            projects = ", ".join(m.removesuffix("_impl") for m in markers)
            foreign.append(f"{name} (marked with the hookimpl marker of project {projects!r})")
        else:
            unmarked.append(name)
    if foreign:
        return text + (
            f"{', '.join(foreign)}: a marker made by another project's pluggy.HookimplMarker "
            "is not noderole's; mark the functions with @noderole.hookimpl"
        )
    if unmarked:
        return text + (
            f"{', '.join(unmarked)} {'is' if len(unmarked) == 1 else 'are'} not marked as a "
            "hook implementation: mark the functions with @noderole.hookimpl (import noderole)"
        )
    return text + (
        "it holds no function named after a hook. Mark its hook functions with "
        "@noderole.hookimpl, and point the entry point at the module that holds them"
    )


def stray_hooks(
    manager: pluggy.PluginManager, infos: Sequence[Plugin], strays: Sequence[tuple[str, Any]]
) -> list[str]:
    """Warnings for optional implementations named ``noderole_*`` that no hook spec declares.

    A close hook name is suggested (matched without the ``noderole_`` prefix every one shares).
    A name of the shape ``noderole_OWNER_...`` where no loaded plugin declares any
    ``noderole_OWNER_*`` hook is what ``optionalhook`` is for (the plugin that adds them is not
    installed, or disabled: konnectivity without k3s): no warning.
    """
    known = known_hooks(manager)
    short = {name.removeprefix("noderole_"): name for name in known}
    by_name = {info.name: info for info in infos}
    warnings: list[str] = []
    for name, impls in strays:
        rest = name.removeprefix("noderole_")
        owner, _, tail = rest.partition("_")
        close = closest(rest, short)
        owned = [hook for hook in known if hook.startswith(f"noderole_{owner}_")]
        for impl in impls:
            plugin = manager.get_name(impl.plugin) or repr(impl.plugin)
            info = by_name.get(plugin)
            where = info.describe() if info else f"plugin {plugin!r}"
            what = f"{where} implements {name} (function {impl.function.__name__!r})"
            if close is not None:
                warnings.append(
                    f"{what}, which is no hook (did you mean {short[close]!r}?): marked "
                    "optionalhook, it loads, but nothing ever calls it. Fix its name (the hook "
                    "reference: docs/reference/hooks.md)"
                )
            elif tail and not owned:
                # No loaded plugin adds noderole_OWNER_* hooks: the plugin that does is not
                # installed, or disabled (konnectivity without k3s). That is what optionalhook
                # is for; a typo shows once the owner is loaded.
                continue
            else:
                listed = f" (hooks of that family: {', '.join(owned)})" if owned else ""
                warnings.append(
                    f"{what}, which is no hook{listed}: marked optionalhook, it loads, but "
                    "nothing ever calls it. Fix its name (docs/reference/hooks.md)"
                )
    return warnings
