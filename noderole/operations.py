"""The operations a node offers (plan, apply, status, stop, restart, render), wired once.

:class:`Operations` is the one place where an invocation's inputs meet: the node root, the plugins
(entry points, given objects, disabled names), the configuration they declare, the clock, the
node context hooks receive, and the backend. The command line only parses arguments, calls an
operation and prints its result; the testing kit (:mod:`noderole.testing`) builds the same object
over a scratch root, so a test plans and applies exactly as ``noderole`` does.

Everything is built lazily and at most once: ``noderole --help`` imports this module's
neighbours (the clock, the root) and nothing else, and a command that needs no plugin never loads
one. Each operation imports what it uses when it runs.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from noderole.clock import Clock, SystemClock
from noderole.errors import ConfigError, ExitCode, UsageError
from noderole.root import NodeRoot

if TYPE_CHECKING:
    from noderole.backends import Backend
    from noderole.config import Config
    from noderole.context import NodeContext
    from noderole.engine import ApplyReport, Progress
    from noderole.plan import Plan
    from noderole.plugins import PluginSet
    from noderole.records import Service, StandIn
    from noderole.render import Rendered

__all__ = ["Operations", "RenderResult", "status_verdict"]

_UP = {"running", "ready"}
_ACTIVE = {"starting", "running", "ready", "backoff"}


class RenderResult:
    """What :meth:`Operations.render` wrote: every rendered item, and what changed on disk."""

    def __init__(
        self, items: Sequence[Rendered], changed: Iterable[str], removed: Sequence[str]
    ) -> None:
        self.items = tuple(items)
        """Every file and link rendered, in order."""
        self.changed = frozenset(changed)
        """Node paths of the items actually written (the others were already up to date)."""
        self.removed = tuple(removed)
        """Node paths an earlier render wrote for services no longer in the role, now removed."""


class Operations:
    """One node's operations, over one root, one set of plugins and one clock.

    A plain class (not attrs): the command line builds it on every invocation, ``--help``
    included, which must stay cheap.
    """

    def __init__(
        self,
        *,
        root: NodeRoot,
        disabled_plugins: tuple[str, ...] = (),
        plugin_objects: tuple[tuple[str, object], ...] = (),
        clock: Clock | None = None,
        autoload: bool | None = None,
        builtin: bool = True,
    ) -> None:
        self.root = root
        """``--root`` / ``NODEROLE_ROOT`` (``/`` at boot)."""
        self.disabled_plugins = disabled_plugins
        """``--disable-plugin`` names (entry-point or plugin names)."""
        self.plugin_objects = plugin_objects
        """Plugins given as objects, registered after the built-in one (tests, embedding)."""
        self.clock: Clock = clock or SystemClock()
        """The clock (fake in tests)."""
        self.autoload = autoload
        """Load entry-point plugins (None: unless NODEROLE_DISABLE_PLUGIN_AUTOLOAD=1)."""
        self.builtin = builtin
        """Register noderole's built-in plugin (``net``, ``cgroups``, the core settings)."""
        self._nodes: dict[str | None, NodeContext] = {}
        self.recorded_config_fallback = False
        """On a broken config file, use the settings the last apply recorded (with a warning)."""
        self.config_warning = ""
        """Why the config file was not used (set by the fallback), else empty."""
        self.warnings: list[str] = []
        """Warnings for the person at the console (the command line prints them on stderr)."""

    def at_root(self, root: NodeRoot) -> Self:
        """The same operations (plugins, clock, options) over another root, built afresh."""
        fresh = type(self).__new__(type(self))
        fresh.__dict__.update(
            {k: v for k, v in self.__dict__.items() if k not in ("plugins", "config", "_nodes")}
        )
        fresh.root = root
        fresh._nodes = {}
        return fresh

    # ---------------------------------------------------------------- wiring

    @functools.cached_property
    def plugins(self) -> PluginSet:
        """The loaded plugins (built-in first, then given objects, then entry points)."""
        from noderole.plugins import load_plugins

        self._check_disabled()
        return load_plugins(
            disabled=self.disabled_plugins,
            plugins=self.plugin_objects,
            autoload=self.autoload,
            builtin=self.builtin,
        )

    def _check_disabled(self) -> None:
        """Refuse ``--disable-plugin NAME`` for a plugin that is not installed (a typo would
        otherwise disable nothing, silently)."""
        if not self.disabled_plugins:
            return
        from noderole.plugins import PLUGIN_GROUP, _autoload_disabled

        known = {"builtin"} if self.builtin else set()
        known |= {name for name, _ in self.plugin_objects}
        autoload = self.autoload if self.autoload is not None else not _autoload_disabled()
        if autoload:
            import importlib.metadata

            known |= {ep.name for ep in importlib.metadata.entry_points(group=PLUGIN_GROUP)}
        unknown = [name for name in self.disabled_plugins if name not in known]
        if unknown:
            raise UsageError(
                f"--disable-plugin {', '.join(unknown)}: no such plugin is installed "
                f"(installed: {', '.join(sorted(known)) or 'none'}; noderole list shows them)"
            )

    @functools.cached_property
    def config(self) -> Config:
        """Effective configuration: plugin defaults overridden by ``/etc/noderole/config.toml``.

        With :attr:`recorded_config_fallback` set (``status``, ``stop``, ``restart``), a broken
        file gives way to the settings the last apply recorded, and :attr:`config_warning` says
        so: a typo must never keep the operator from stopping what runs.
        """
        from noderole.config import load_config

        tables = self.plugins.settings_tables()
        try:
            return load_config(self.root, tables)
        except ConfigError as exc:
            if not self.recorded_config_fallback:
                raise
            from noderole.config import _build
            from noderole.state import LAST_APPLY_FILE, read_last_apply

            recorded = read_last_apply(self.root).get("settings")
            declared = {t.table: {s.name for s in t.settings} for t in tables}
            usable = {
                table: {k: v for k, v in values.items() if k in declared.get(table, ())}
                for table, values in (recorded or {}).items()
                if table in declared
            }
            try:
                config = _build(tables, usable, found=True)
            except ConfigError:
                raise exc from None
            source = (
                f"the settings recorded by the last apply ({LAST_APPLY_FILE})"
                if recorded is not None
                else "the plugins' defaults (no apply recorded its settings)"
            )
            self.config_warning = (
                f"{exc}. Using {source} for this command; fix the file (noderole config check) "
                "before the next apply"
            )
            return config

    def node_for(self, role: str | None) -> NodeContext:
        """The node context hooks receive while ``role`` is in question (one per role)."""
        node = self._nodes.get(role)
        if node is None:
            from noderole.context import NodeContext

            node = NodeContext(
                root=self.root,
                config=self.config,
                pluginmanager=self.plugins.manager,
                clock=self.clock,
                role=role,
            )
            self._nodes[role] = node
        return node

    @property
    def node(self) -> NodeContext:
        """The node context when no role is in question (``list``, ``config``, completion)."""
        return self.node_for(None)

    def setting(self, key: str) -> Any:
        """One value of noderole's own ``[noderole]`` settings table."""
        return self.config.table("noderole")[key]

    # ---------------------------------------------------------------- definitions

    def services(self, role: str | None = None) -> list[Service]:
        """Every service the plugins define, asked with ``node.role`` set to ``role``."""
        return self.plugins.services(self.node_for(role))

    def standins(self, role: str | None = None) -> list[StandIn]:
        """Every rehearsal stand-in the plugins supply, asked with ``node.role`` set to ``role``."""
        return self.plugins.standins(self.node_for(role))

    def plan(self, role: str, services: Sequence[Service] | None = None) -> Plan:
        """The plan of ``role``, from the plugins' services (collected here unless the caller has
        them for this role already: hooks read files, so an operation asks them once)."""
        from noderole.plan import build_plan

        if services is None:
            services = self.services(role)
        return build_plan(services, role, plugins=self.plugins.names())

    def recorded_role(self, role: str | None = None) -> str:
        """``role`` if given, else the role last applied; a UsageError when there is none."""
        from noderole.state import ROLE_FILE, read_role

        if role:
            return role
        recorded = read_role(self.root)
        if recorded is None:
            raise UsageError(
                f"no role given and none recorded in {ROLE_FILE}: name one (noderole status ROLE) "
                "or apply a role first"
            )
        return recorded

    def service(self, name: str) -> Service:
        """The definition of service ``name`` now, in the role last applied (``hook``, ``exec``)."""
        from noderole.state import read_role

        services = {s.name: s for s in self.services(read_role(self.root))}
        try:
            return services[name]
        except KeyError:
            known = ", ".join(sorted(services)) or "none"
            raise UsageError(
                f"no installed plugin defines service {name!r} (services: {known})"
            ) from None

    def targets(self, names: Sequence[str]) -> tuple[Plan, list[str]]:
        """The plan of the role named (or recorded) and the services to act on, in stop order.

        One name that is a role acts on the whole role, unless the role has a service of that
        name; otherwise the names are services of the recorded role.
        """
        services = None
        if len(names) == 1:
            services = self.services(names[0])
            if any(names[0] in s.roles for s in services):
                plan = self.plan(names[0], services)
                if names[0] not in plan:  # a role that is also one of its services names it
                    return plan, list(plan.stop_order())
        role = self.recorded_role()
        if services is None or role != names[0]:
            services = self.services(role)
        plan = self.plan(role, services)
        if not names:
            return plan, list(plan.stop_order())
        unknown = [n for n in names if n not in plan]
        if unknown:
            raise UsageError(
                f"{', '.join(unknown)}: not a service of role {plan.role} "
                f"(its services: {', '.join(plan.names())})"
            )
        return plan, [n for n in plan.stop_order() if n in names]

    # ---------------------------------------------------------------- backends

    def backend(self, requested: str = "auto") -> Backend:
        """The backend for ``requested`` (``auto``: the configured one, then the init system)."""
        from noderole.backends.detect import backend_named

        if requested == "auto":
            requested = str(self.setting("backend"))
        if requested in ("openrc", "systemd") and not self.root.is_real:
            self.warnings.append(
                f"--backend {requested} under --root {self.root.path}: files are written under the "
                f"root, but {requested} is this machine's own init system; a rehearsal under "
                "--root uses the native supervisor (--backend auto or native)"
            )
        if requested == "systemd" and not os.path.isdir("/run/systemd/system"):
            from noderole.errors import BackendError

            raise BackendError(
                "backend systemd needs a running systemd, and /run/systemd/system does not exist: "
                "is systemd the init system of this machine? Use --backend native otherwise"
            )
        return backend_named(requested, self.root, noderole_path=str(self.setting("noderole_path")))

    # ---------------------------------------------------------------- apply, stop, restart

    def apply(
        self,
        plan: Plan,
        backend: Backend,
        *,
        progress: Progress | None = None,
        lock_timeout: float = 300.0,
        readiness_timeout: float | None = None,
    ) -> ApplyReport:
        """Apply ``plan`` under the node lock, then record the role and the definition digests.

        ``readiness_timeout`` (seconds a dependent waits for a service to be ready) defaults to
        the ``readiness_timeout`` setting.
        """
        from noderole.console import QuietProgress
        from noderole.engine import apply_plan
        from noderole.state import node_lock, read_applied, write_applied, write_role

        what = f"apply {plan.role}"
        with node_lock(self.root, timeout=lock_timeout, clock=self.clock, what=what):
            previous = read_applied(self.root)
            recorded: dict[str, dict[str, str]] = {}
            report = apply_plan(
                plan,
                root=self.root,
                clock=self.clock,
                backend=backend,
                progress=progress if progress is not None else QuietProgress(),
                readiness_timeout=(
                    float(self.setting("readiness_timeout"))
                    if readiness_timeout is None
                    else readiness_timeout
                ),
                progress_every=float(self.setting("progress_interval")),
                previous=previous,
                on_digests=recorded.update,
            )
            write_role(self.root, plan.role)
            write_applied(self.root, {**previous, **recorded})
            self._record_outcomes(plan, report)
        return report

    def _record_outcomes(self, plan: Plan, report: ApplyReport) -> None:
        """Record each service's outcome (kept for services this apply did not touch, as with
        ``restart`` of a few) and the settings used, secret ones left out."""
        from noderole.state import read_last_apply, write_last_apply

        before = read_last_apply(self.root)
        services = {
            name: entry
            for name, entry in (before.get("services") or {}).items()
            if before.get("role") == plan.role and name in plan
        }
        now = self.clock.time()
        for service in report.services:
            services[service.name] = {
                "outcome": service.status,
                "reason": service.reason,
                "at": now,
            }
        settings: dict[str, dict[str, Any]] = {}
        for entry in self.config.entries():
            if entry.source != "default" and not entry.setting.secret:
                settings.setdefault(entry.table, {})[entry.setting.name] = entry.value
        if self.config_warning:  # a fallback run keeps the settings it fell back to
            settings = before.get("settings") or {}
        write_last_apply(
            self.root,
            {
                "role": plan.role,
                "backend": report.backend,
                "at": now,
                "services": services,
                "settings": settings,
            },
        )

    def dry_run(self, plan: Plan, backend: Backend) -> list[dict[str, Any]]:
        """What applying ``plan`` would do to each service, changing nothing (``--dry-run``)."""
        from noderole.dryrun import dry_run_report

        return dry_run_report(plan, backend, root=self.root, clock=self.clock)

    def stop(
        self, plan: Plan, names: Sequence[str], backend: Backend, *, lock_timeout: float = 300.0
    ) -> list[str]:
        """Stop ``names`` (in the order given) under the node lock; return those that had a
        process running (or respawning), so nobody is told a stopped service was stopped."""
        from noderole.state import node_lock

        processes = [n for n in names if plan[n].service.command is not None]
        with node_lock(self.root, timeout=lock_timeout, clock=self.clock, what="stop"):
            before = backend.status(processes)
            backend.stop(processes)
        return [n for n in processes if n in before and before[n].state in _ACTIVE]

    def restart(
        self,
        plan: Plan,
        names: Sequence[str],
        backend: Backend,
        *,
        progress: Progress | None = None,
        lock_timeout: float = 300.0,
    ) -> ApplyReport:
        """Stop ``names``, then apply just them again (pre-start steps included)."""
        from noderole.state import node_lock

        with node_lock(self.root, timeout=lock_timeout, clock=self.clock, what="restart"):
            backend.stop([n for n in names if plan[n].service.command is not None])
        return self.apply(plan.subset(names), backend, progress=progress, lock_timeout=lock_timeout)

    # ---------------------------------------------------------------- status

    def status_rows(
        self, plan: Plan, backend: Backend, *, log_lines: int = 5
    ) -> list[dict[str, Any]]:
        """One row per process of ``plan``: state, pid, uptime, restarts, last exit, the log
        (only when the file exists), the last apply's outcome, and, for a failed or
        crash-looping service, the last ``log_lines`` lines of its log (secrets as ***)."""
        from noderole.state import read_last_apply

        entries = [e for e in plan.services if e.service.command is not None]
        current: Mapping[str, Any] = backend.status([e.name for e in entries])
        last = read_last_apply(self.root)
        outcomes = (last.get("services") or {}) if last.get("role") == plan.role else {}
        now = time.time()
        rows = []
        for entry in entries:
            status = current.get(entry.name)
            state = status.state if status is not None else "stopped"
            started_at = getattr(status, "started_at", None)
            log = entry.service.output_log or entry.service.error_log
            local_log = self.root.resolve(log) if log else None
            exists = local_log is not None and local_log.is_file()
            reason = getattr(status, "reason", "")
            outcome = outcomes.get(entry.name)
            failing = state in ("crashed", "backoff") or (
                outcome is not None and outcome.get("outcome") in ("failed", "skipped")
            )
            rows.append(
                {
                    "name": entry.name,
                    "state": state,
                    # In backoff there is no process: say when the next attempt comes instead.
                    "pid": None if state == "backoff" else getattr(status, "pid", None),
                    "next_attempt": reason if state == "backoff" else None,
                    "uptime": round(now - started_at, 1) if started_at and state in _UP else None,
                    "restarts": getattr(status, "restarts", 0),
                    "last_exit": getattr(status, "last_exit", None),
                    "log": log if exists else None,
                    "reason": "" if reason == "not supervised" else reason,
                    "survivors": "survived it" in reason,
                    "needs_ready": entry.service.readiness is not None,
                    "last_apply": outcome,
                    "log_tail": (
                        _log_tail(local_log, log_lines, entry.service)
                        if failing and exists and local_log is not None and log_lines
                        else []
                    ),
                }
            )
        return rows

    def status(
        self,
        plan: Plan,
        backend: Backend,
        *,
        wait: bool = False,
        timeout: float = 300.0,
        log_lines: int = 5,
    ) -> tuple[list[dict[str, Any]], ExitCode]:
        """The status rows of ``plan`` and their verdict; with ``wait``, polled (on the clock)
        until the verdict is no longer "still starting" or ``timeout`` seconds have passed."""
        deadline = self.clock.monotonic() + timeout
        rows = self.status_rows(plan, backend, log_lines=log_lines)
        verdict = status_verdict(rows)
        while wait and verdict == ExitCode.STARTING and self.clock.monotonic() < deadline:
            self.clock.sleep(0.1)
            rows = self.status_rows(plan, backend, log_lines=log_lines)
            verdict = status_verdict(rows)
        return rows, verdict

    # ---------------------------------------------------------------- render

    def render(self, role: str, backend: str, *, static: bool = False) -> RenderResult:
        """Write ``backend``'s (openrc or systemd) files for every service of ``role``, remove
        what an earlier render wrote for services no longer in it, and record the role."""
        from noderole.render import render_openrc, render_systemd, sync_rendered
        from noderole.state import write_role

        plan = self.plan(role)
        services = [entry.service for entry in plan.services]
        noderole_path = str(self.setting("noderole_path"))
        if backend == "openrc":
            items = render_openrc(services, noderole_path=noderole_path, exec_mode=not static)
        elif backend == "systemd":
            items = render_systemd(services, noderole_path=noderole_path, exec_mode=not static)
        else:
            raise UsageError(f"cannot render for backend {backend!r}: use openrc or systemd")
        manifest = f"/var/lib/noderole/rendered-{backend}.json"
        changed, removed = sync_rendered(items, root=self.root, manifest=manifest)
        write_role(self.root, role)
        written = set(changed)
        return RenderResult(
            items,
            changed=[item.path for item in items if self.root.resolve(item.path) in written],
            removed=removed,
        )


def _log_tail(path: Path, lines: int, service: Service) -> list[str]:
    """The last ``lines`` lines of ``path`` (read from its last 64 KiB), the service's secret
    values replaced by ***."""
    from noderole.records import Secret

    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - 65536))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    secrets = [v.reveal() for v in service.environment.values() if isinstance(v, Secret)]
    tail = text.splitlines()[-lines:]
    for secret in (s for s in secrets if s):
        tail = [line.replace(secret, "***") for line in tail]
    return tail


def status_verdict(rows: Sequence[Mapping[str, Any]]) -> ExitCode:
    """0 all up, 1 some failed, 11 still starting (like ``cloud-init status``)."""
    if any(r["state"] in ("crashed", "stopped") for r in rows):
        return ExitCode.FAILED
    if all(
        r["state"] == "ready" or (r["state"] == "running" and not r["needs_ready"]) for r in rows
    ):
        return ExitCode.OK
    return ExitCode.STARTING
