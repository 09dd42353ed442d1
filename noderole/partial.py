"""A role applied without the plugins that could not define their services.

At ``apply``, one plugin whose ``noderole_services`` raises, hangs or returns garbage must not
keep every other service of the node down, as one broken runscript or unit does not under OpenRC
or systemd. Its services are unknown (the hook that names them failed), so they cannot be
planned; the plugin is reported as failed (``plugin:NAME``, with the last line of its
traceback), and so is every service that ``need``s a name nothing loaded defines any more, since
the broken plugin may have been its provider. Neither is started nor stopped: what an earlier
apply started of them runs on untouched, and stays in the recorded plan (so ``stop`` still stops
it). Everything else is planned and started as usual, and the apply's exit status says that
something failed. ``plan`` and ``apply --dry-run`` stay
strict: they report the broken plugin as the error it is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence

from noderole.engine import ServiceReport
from noderole.errors import ConfigError, NoderoleError
from noderole.records import Service

__all__ = ["PLUGIN_PREFIX", "broken_summary", "without_broken"]

PLUGIN_PREFIX = "plugin:"
"""Prefix of a broken plugin's row in the apply report (``:`` is never in a service name)."""


def broken_summary(plugin: str, error: NoderoleError) -> str:
    """``plugin 'x' failed to define its services (RuntimeError: disk on fire)``; for a value of
    ``config.toml`` that cannot be used, the configuration error itself, which names the key."""
    if isinstance(error, ConfigError):
        return f"plugin {plugin!r} could not define its services: {error}"
    cause = error.__cause__
    if cause is not None:
        text = str(cause)
        last = f"{type(cause).__name__}: {text}" if text else type(cause).__name__
    else:
        last = str(error)
    return f"plugin {plugin!r} failed to define its services ({last})"


def _fix(plugin: str, error: NoderoleError) -> str:
    if isinstance(error, ConfigError):  # its message says what to fix
        return "`noderole config check` lists every problem of the file"
    return f"Fix the plugin, or disable it with --disable-plugin {plugin}"


def without_broken(
    services: Sequence[Service], role: str, broken: Mapping[str, NoderoleError]
) -> tuple[list[Service], list[ServiceReport]]:
    """The services that can still be planned, and the failed reports of what cannot.

    A service is left out when it needs a name that no service kept defines or provides,
    transitively. Reports: one per broken plugin, then one per left-out service the role would
    have started (in the role, or needed or wanted by one that is), sorted by name.
    """
    summaries = [broken_summary(plugin, error) for plugin, error in broken.items()]
    cause = "; ".join(summaries)
    reports = [
        ServiceReport(
            name=f"{PLUGIN_PREFIX}{plugin}",
            status="failed",
            reason=f"{summary}; its services are not started. {_fix(plugin, error)}",
        )
        for (plugin, error), summary in zip(broken.items(), summaries, strict=True)
    ]
    left_out: dict[str, str] = {}
    while True:
        kept = [s for s in services if s.name not in left_out]
        known = {s.name for s in kept} | {v for s in kept for v in s.provide}
        newly = {
            s.name: next(t for t in s.need if t not in known)
            for s in kept
            if any(t not in known for t in s.need)
        }
        if not newly:
            break
        for name, target in newly.items():
            which = (
                "which is not applied either"
                if target in left_out
                else "which no loaded plugin defines now"
            )
            left_out[name] = f"not applied: it needs {target}, {which}: {cause}"
    for name in sorted(_reached(services, role) & set(left_out)):
        reports.append(ServiceReport(name=name, status="failed", reason=left_out[name]))
    return kept, reports


def _reached(services: Iterable[Service], role: str) -> set[str]:
    """Names of the services ``role`` would start: its own, and what they need or want."""
    by_name: dict[str, Service] = {}
    providers: dict[str, list[str]] = {}
    for service in services:
        by_name.setdefault(service.name, service)
        for virtual in service.provide:
            providers.setdefault(virtual, []).append(service.name)
    reached = {name for name, service in by_name.items() if role in service.roles}
    queue = deque(reached)
    while queue:
        service = by_name[queue.popleft()]
        for target in (*service.need, *service.want):
            for other in [target] if target in by_name else providers.get(target, []):
                if other not in reached:
                    reached.add(other)
                    queue.append(other)
    return reached
