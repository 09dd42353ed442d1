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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self, cast

from noderole.clock import Clock, SystemClock
from noderole.errors import ConfigError, ExitCode, NoderoleError, UsageError
from noderole.root import NodeRoot
from noderole.tomlcache import CONFIG_PATH

if TYPE_CHECKING:
    from pathlib import Path

    from noderole.backends import Backend
    from noderole.backends.native import NativeBackend
    from noderole.config import Config
    from noderole.context import NodeContext
    from noderole.engine import ApplyReport, Progress, ServiceReport
    from noderole.plan import Plan
    from noderole.plugins import PluginSet
    from noderole.recorded import RecordedPlan, RecordedService, RecordedView
    from noderole.records import Service, Wait
    from noderole.rehearsal_records import StandIn
    from noderole.render import Rendered
    from noderole.renewal import CertificateCheck
    from noderole.reset import ResetReport

__all__ = [
    "LOGROTATE_FILE",
    "LogrotateConfig",
    "Operations",
    "RenderResult",
    "logrotate_config",
    "logrotate_text",
    "status_verdict",
    "sync_logrotate",
]


_UP = {"running", "ready"}

SYSTEMD_RUNNING = "/run/systemd/system"
"""The directory systemd makes when it boots the machine (sd_booted(3)): absent, systemd is not
this machine's init system, and every ``systemctl`` call would fail."""


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
        self.warned: set[str] = set()
        """The warnings printed already: a command that looks twice says each once."""
        self._prepared: NativeBackend | None = None
        """The native backend :meth:`prepare_backend` readied, which :meth:`backend` returns."""

    def at_root(self, root: NodeRoot) -> Self:
        """The same operations (plugins, clock, options) over another root, built afresh."""
        fresh = type(self).__new__(type(self))
        fresh.__dict__.update(
            {k: v for k, v in self.__dict__.items() if k not in ("plugins", "config", "_nodes")}
        )
        fresh.root = root
        fresh._nodes = {}
        fresh._prepared = None
        return fresh

    # ---------------------------------------------------------------- wiring

    @functools.cached_property
    def plugins(self) -> PluginSet:
        """The loaded plugins (built-in first, then given objects, then entry points)."""
        from noderole.entrypoints import CACHE_FILE
        from noderole.plugins import load_plugins

        plugins = load_plugins(
            disabled=self.disabled_plugins,
            plugins=self.plugin_objects,
            autoload=self.autoload,
            builtin=self.builtin,
            entry_point_cache=self.root.local(CACHE_FILE),
        )
        self.warnings.extend(plugins.warnings)  # a plugin that implements no hook, ...
        return plugins

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
            return load_config(self.root, tables, disabled=self.disabled_plugins)
        except ConfigError as exc:
            if not self.recorded_config_fallback:
                raise
            from noderole.config import config_from_values
            from noderole.paths import LAST_APPLY_FILE
            from noderole.state import read_last_apply

            recorded = read_last_apply(self.root).get("settings")
            declared = {t.table: {s.name for s in t.settings} for t in tables}
            usable = {
                table: {k: v for k, v in values.items() if k in declared.get(table, ())}
                for table, values in (recorded or {}).items()
                if table in declared
            }
            try:
                config = config_from_values(tables, usable)
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
                plugins=self.plugins,
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

    def own_settings_problems(self) -> list[str]:
        """What is wrong with the ``[noderole]`` settings only noderole's own commands read
        (``noderole_path``, ``textfile_dir``), each naming its key, for ``config check``."""
        problems = [textfile_dir_problem(str(self.setting("textfile_dir")))]
        try:
            self.noderole_path()
        except ConfigError as error:
            problems.append(str(error))
        return [problem for problem in problems if problem]

    def noderole_path(self) -> str:
        """The ``noderole_path`` setting, which init files run at boot: a ConfigError naming it
        unless it is a plain absolute path (run from no particular directory; systemd's Exec
        lines take no quotes or spaces in their program)."""
        from noderole.render._quote import is_plain_word
        from noderole.root import climbs_out

        value = str(self.setting("noderole_path"))
        if not (value.startswith("/") and is_plain_word(value)) or climbs_out(value):
            raise ConfigError(
                f"{CONFIG_PATH}:noderole.noderole_path: {value!r} is not a plain absolute path: "
                "init files run it at boot from no particular directory, and systemd takes no "
                "quotes or spaces in it; set the path of the installed noderole command, e.g. "
                "/usr/local/bin/noderole"
            )
        return value

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
        from noderole.paths import ROLE_FILE
        from noderole.state import role_record

        if role:
            return role
        recorded, damage = role_record(self.root)
        if recorded is None:
            import click  # the error path only: name the command the user ran

            context = click.get_current_context(silent=True)
            command = f"noderole {context.info_name if context is not None else 'status'}"
            if damage:
                raise _damaged_role_record(damage, command)
            raise UsageError(
                f"no role given and none recorded in {ROLE_FILE}: name one ({command} ROLE) "
                "or apply a role first"
            )
        return recorded

    # ---------------------------------------------------------------- the role at boot

    def resolve_role(self, role: str | None = None) -> str:
        """The role ``apply`` applies: ``role`` if given, else the role recorded by the last
        apply, else the plugins' answer from the node's first-boot inputs.

        The recorded role comes before the plugins' answer, as in the shell's node-role selector:
        first-boot inputs decide the role at the first boot, the recorded role afterwards, so a
        role never changes because an input file was edited or a service failed. Nothing is
        written here; a resolver that fails raises its error (nothing has been written or
        started yet), and no answer at all is a :class:`UsageError` saying what to pass.
        """
        from noderole.paths import ROLE_FILE
        from noderole.plugins import resolve_role
        from noderole.state import role_record

        if role:
            return role
        recorded, damage = role_record(self.root)
        if recorded is not None:
            return recorded
        if damage:  # the record decides, not the first-boot inputs: it cannot be read, so ask
            raise _damaged_role_record(damage, "noderole apply")
        resolved = resolve_role(self.plugins, self.node_for(None))
        if resolved is not None:
            return resolved
        # A plugin whose services hook fails must not turn this usage error into its own.
        services = self.plugins.services(self.node_for(None), broken={})
        roles = sorted({r for s in services for r in s.roles})
        raise UsageError(
            f"no role given, none recorded in {ROLE_FILE}, and no installed plugin resolves one "
            "from this node's first-boot inputs: pass the role, as in noderole apply ROLE "
            f"(roles of the installed plugins: {', '.join(roles) or 'none'})"
        )

    def plan_for_apply(self, role: str) -> tuple[Plan, list[ServiceReport]]:
        """The plan ``apply`` starts, and the failures of plugins that could not define services.

        A plugin whose ``noderole_services`` fails is left out with every service that needs
        what it may have defined (see :mod:`noderole.partial`); the rest of the role is planned
        as usual. When nothing of the role is left, the first plugin's error is raised.
        """
        from noderole.plan import build_plan

        broken: dict[str, NoderoleError] = {}
        services = self.plugins.services(self.node_for(role), broken=broken)
        if not broken:
            return self.plan(role, services), []
        from noderole.partial import without_broken

        kept, failures = without_broken(services, role, broken)
        if not any(role in s.roles for s in kept):
            raise next(iter(broken.values()))
        return build_plan(kept, role, plugins=self.plugins.names()), failures

    def recorded_plan(self, role: str | None = None, *, note: bool = True) -> Plan:
        """The plan of ``role`` (default: the recorded role) for ``status`` and ``stop``: the
        one the last apply recorded, without loading any plugin, when it is of that role;
        otherwise planned from the plugins. ``note``: as :meth:`_recorded`'s."""
        recorded = self._recorded(role, note=note)
        if recorded is not None:
            return recorded.plan
        return self.plan(self.recorded_role(role))

    def recorded_backend(self, requested: str = "auto") -> Backend:
        """:meth:`backend` for ``status`` and ``stop``: with ``auto`` and a recorded plan, the
        backend that applied it, without loading the plugins or their settings."""
        recorded = self._recorded(None, note=False)
        if recorded is None:
            return self.backend(requested)
        from noderole.backends.detect import backend_named

        name = recorded.backend if requested == "auto" else requested
        _require_running(name)  # else every systemctl call fails, and each service reads stopped
        plan = recorded.plan

        def readiness(service: str) -> Wait | None:
            return plan[service].service.readiness if service in plan else None

        return backend_named(
            name,
            self.root,
            noderole_path=recorded.noderole_path,
            clock=self.clock,
            readiness=readiness,
        )

    def recorded_status(
        self, name: str | None, requested: str = "auto"
    ) -> tuple[RecordedView, Backend, str | None] | None:
        """What ``status [NAME]`` shows, read from the recorded plan without records, attrs or
        planning when it can be: the applied role's view, its native backend, and the service
        asked for (None for the whole role). None when the full path is needed: no usable
        record, another role, or a backend that needs the readiness checks as records."""
        from noderole.recorded import read_view
        from noderole.state import read_role

        recorded_role = read_role(self.root)
        if recorded_role is None:
            return None
        view = read_view(self.root, None)
        if view is None or (view.backend if requested == "auto" else requested) != "native":
            return None
        if not name or name == view.role:
            only = None
        elif name in view:
            only = name
        else:
            return None  # another role: planned from the plugins
        self._note_next_role(recorded_role, view.role)
        from noderole.backends.detect import backend_named

        return view, backend_named("native", self.root, noderole_path=view.noderole_path), only

    def _recorded(self, role: str | None, *, note: bool = True) -> RecordedPlan | None:
        """The recorded plan: of ``role``, or (None) the one the last apply started, whatever
        role is recorded for the next (``enable`` or ``render`` of another role records that
        one, while the services of the last apply still run: those are what ``status`` and
        ``stop`` are about). With ``note``, a warning says so when the two differ."""
        from noderole.recorded import read_plan
        from noderole.state import read_role

        recorded_role = read_role(self.root)
        if recorded_role is None or (role and role != recorded_role):
            return None
        recorded = read_plan(self.root, role)
        if recorded is not None and not role and note:
            self._note_next_role(recorded_role, recorded.plan.role)
        return recorded

    def next_role(self) -> str | None:
        """The role recorded for the next apply (the role file), or None."""
        from noderole.state import read_role

        return read_role(self.root)

    def _note_next_role(self, next_role: str, applied: str) -> None:
        """Warn when the role recorded for the next apply is not the one last applied."""
        if next_role != applied:
            self.warnings.append(
                f"role {next_role} is recorded for the next apply (by `noderole enable` or "
                f"`render`), while what runs is role {applied}, as last applied: shown and "
                f"stopped as that; `noderole apply` changes the node to role {next_role}"
            )

    def service(self, name: str) -> Service:
        """The definition of service ``name`` now, in the role last applied (``hook``, ``exec``)."""
        from noderole.state import read_role

        services = {s.name: s for s in self.services(read_role(self.root))}
        try:
            return services[name]
        except KeyError:
            from noderole.records import did_you_mean

            known = ", ".join(sorted(services)) or "none"
            raise UsageError(
                f"no installed plugin defines service {name!r}{did_you_mean(name, services)} "
                f"(services: {known})"
            ) from None

    def targets(self, names: Sequence[str], *, from_record: bool = False) -> tuple[Plan, list[str]]:
        """The plan of the role named (or recorded) and the services to act on, in stop order.

        One name that is a role acts on the whole role, unless the role has a service of that
        name; otherwise the names are services of the recorded role. With ``from_record``
        (``stop``), the applied role's plan comes from the record, without loading any plugin,
        when it has every name asked for.
        """
        if from_record:
            recorded = self._recorded(None)
            if recorded is not None:
                plan = recorded.plan
                whole_role = len(names) == 1 and names[0] == plan.role and plan.role not in plan
                if not names or whole_role:
                    return plan, list(plan.stop_order())
                if all(n in plan for n in names):
                    return plan, [n for n in plan.stop_order() if n in names]
                # Another role, or a name the record lacks: the plugins decide (and say why).
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
            from noderole.records import did_you_mean

            named = ", ".join(f"{n}{did_you_mean(n, plan.names())}" for n in unknown)
            raise UsageError(
                f"{named}: not a service of role {plan.role} "
                f"(its services: {', '.join(plan.names())})"
            )
        return plan, [n for n in plan.stop_order() if n in names]

    # ---------------------------------------------------------------- backends

    def prepare_backend(self, requested: str = "auto") -> None:
        """Ahead of planning, start the native supervisor's interpreter (it imports meanwhile;
        see :meth:`~noderole.supervisor.Supervisor.prepare`) when ``requested`` is likely to be
        the native backend: named, or ``auto`` where the init system is not systemd or OpenRC
        (always under ``--root``). Reads no setting (they need the plugins): a configured
        ``backend`` that is not native merely leaves the standby unused.
        :meth:`backend` returns this backend when it chooses the native one;
        :meth:`discard_prepared` ends a standby no start needed.
        """
        from noderole.backends.detect import detect_init

        if self._prepared is not None or requested not in ("auto", "native"):
            return
        if requested == "auto" and detect_init(self.root) != "native":
            return
        from noderole.backends.native import NativeBackend

        self._prepared = NativeBackend(self.root)
        self._prepared.prepare()

    def discard_prepared(self) -> None:
        """End the standby daemon :meth:`prepare_backend` started, if nothing used it."""
        if self._prepared is not None:
            self._prepared.discard()

    def backend(self, requested: str = "auto") -> Backend:
        """The backend for ``requested`` (``auto``: the configured one, then the init system)."""
        from noderole.backends.detect import backend_named, chosen_name

        name = chosen_name(self._backend_choice(requested), self.root)
        if self._prepared is not None and name == "native":
            return self._prepared  # the standby daemon started ahead of planning
        return backend_named(
            name,
            self.root,
            # The native backend runs no init file: its noderole_path is never read.
            noderole_path=self.noderole_path() if name != "native" else "noderole",
            clock=self.clock,
            readiness=self._readiness_of,
        )

    def backend_name(self, requested: str = "auto") -> str:
        """The name of the backend :meth:`backend` would return, with the same warnings and
        errors (``plan`` only shows the name). The native backend is not built: that would
        import the supervisor's client, and building it checks nothing. An init system's
        backend is, since building it checks that its tool is installed."""
        from noderole.backends.detect import chosen_name

        choice = requested if requested != "auto" else str(self.setting("backend"))
        if chosen_name(choice, self.root) != "native":
            return self.backend(requested).name
        return chosen_name(self._backend_choice(requested), self.root)

    def _backend_choice(self, requested: str) -> str:
        """``requested``, or the configured backend for ``auto``, checked against the machine."""
        if requested == "auto":
            requested = str(self.setting("backend"))
        if requested in ("openrc", "systemd") and not self.root.is_real:
            self.warnings.append(
                f"--backend {requested} under --root {self.root.path}: files are written under the "
                f"root, but {requested} is this machine's own init system; a rehearsal under "
                "--root uses the native supervisor (--backend auto or native)"
            )
        _require_running(requested)
        return requested

    def _readiness_of(self, name: str) -> Wait | None:
        """The readiness check the plugins declare for ``name`` (an init system reports only
        whether a process runs; ``ready`` needs the check)."""
        checks = self.__dict__.get("_readiness_checks")
        if checks is None:
            checks = {service.name: service.readiness for service in self.services()}
            self.__dict__["_readiness_checks"] = checks
        check: Wait | None = checks.get(name)
        return check

    # ---------------------------------------------------------------- apply, stop, restart

    def apply(
        self,
        plan: Plan,
        backend: Backend,
        *,
        progress: Progress | None = None,
        lock_timeout: float = 300.0,
        readiness_timeout: float | None = None,
        progress_every: float | None = None,
        publish: bool = True,
        failures: Sequence[ServiceReport] = (),
        record_plan: bool = True,
    ) -> ApplyReport:
        """Apply ``plan`` under the node lock: record the role and the plan (``record_plan``,
        off for a ``restart`` of a few services), start, then record the definition digests.

        ``readiness_timeout`` (seconds a dependent waits for a service to be ready) and
        ``progress_every`` (seconds between "still waiting" lines) default to their settings.
        ``failures`` (from :meth:`plan_for_apply`) are put at
        the head of the report, so it is not ok when a plugin could not define its services.
        With ``publish``, the outcome is kept for the fleet metrics (:meth:`publish_metrics`).
        """
        from noderole import recordclass
        from noderole.console import QuietProgress
        from noderole.engine import apply_plan
        from noderole.manifest import record_processes
        from noderole.state import StateError, node_lock, read_applied, write_applied

        what = f"apply {plan.role}"
        with node_lock(self.root, timeout=lock_timeout, clock=self.clock, what=what):
            if record_plan:
                left = self._left_out(plan, backend, failures)
                retiring = self._retiring(plan, backend, failures)
                # What left the plan goes before the plan is recorded: an apply killed in
                # between finds them in the record again, and ends them then.
                if left:
                    self._stop_left_out(plan, backend, left)
                if retiring:
                    self._retire(plan, backend, retiring)
                # Before anything starts: the role does not change because a service failed,
                # and the next boot applies the same one (status and stop read the plan).
                self._record_role(plan, backend, failures)
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
                progress_every=(
                    float(self.setting("progress_interval"))
                    if progress_every is None
                    else progress_every
                ),
                previous=previous,
                on_digests=recorded.update,
            )
            if failures:
                report = recordclass.evolve(report, services=(*failures, *report.services))
            applied = {**previous, **recorded}
            if applied != previous:  # an apply that changed nothing writes nothing
                write_applied(self.root, applied)
            record_processes(self.root, plan, backend.name)
            if record_plan and not failures:
                # The role's logs as planned; a broken plugin's services would drop out of it.
                self._write_logrotate(plan, backend)
            try:
                self._record_outcomes(plan, report, whole=record_plan)
            except StateError as error:
                # The services run: the record only feeds `status` and the fleet metrics. An
                # error here made a boot whose every service started exit 1, with no summary.
                self.warnings.append(
                    f"{error}; the services are as reported, and `status` shows the outcome of "
                    "the apply before this one until a later apply can record its own"
                )
            self._store_parsed_config()
        if publish:
            self.publish_metrics(plan, backend, report)
        return report

    def _write_logrotate(self, plan: Plan, backend: Backend) -> None:
        """Make ``/etc/logrotate.d/noderole`` rotate the logs of ``plan``'s services as
        ``backend`` writes them (:func:`logrotate_config`); unchanged, nothing is written."""
        services = [entry.service for entry in plan.services]
        self._sync_logrotate(services, native=backend.name == "native")

    def _sync_logrotate(self, services: Sequence[Service], *, native: bool) -> str:
        """:func:`sync_logrotate` for ``services``' logs; what changed (``written``,
        ``removed`` or ``""``). A file that cannot be written, or is not noderole's to replace,
        is a warning: the services run, and the units are written, without it."""
        try:
            settings = self.config.table("noderole")
        except NoderoleError:  # an apply of a plan built elsewhere (the testing kit's)
            return ""
        config = logrotate_config(services, settings, native=native)
        self.warnings.extend(config.left_out)
        try:
            changed = sync_logrotate(self.root, config.text)
            if changed == "written":  # looked at when written, not at every apply
                self.warnings.extend(_named_elsewhere(self.root, config.logs))
            return changed
        except NoderoleError as exc:
            self.warnings.append(
                f"{exc}; the services' logs are not rotated by noderole (or set [noderole] "
                "logrotate = false to leave that file to you)"
            )
            return ""

    def _store_parsed_config(self) -> None:
        """Keep the ``config.toml`` this command parsed, so the next commands need no TOML
        parser, and record the cache for ``reset`` (an apply writes the node's records anyway;
        ``plan`` and ``status`` write nothing)."""
        from noderole.tomlcache import CONFIG_CACHE, store_parsed

        if store_parsed(self.root.local(CONFIG_CACHE)):
            from noderole import manifest

            manifest.record(self.root, "state", [CONFIG_CACHE])

    def _left_out(
        self, plan: Plan, backend: Backend, failures: Sequence[ServiceReport]
    ) -> list[str]:
        """What the last apply started that ``plan`` no longer has (see recorded.left_out).

        Without a usable record (none, damaged, written by another version or under another
        backend), the native supervisor is asked what it runs: it knows its services whatever
        the record says. Should a plugin have failed to load, nothing tells which of them were
        its own: none is stopped, and a warning names them."""
        from noderole.recorded import left_out

        origins, names = _kept_by(failures)
        left = left_out(self.root, plan.names(), backend.name, origins=origins, names=names)
        if left is not None or backend.name != "native":
            return left or []
        from noderole.supervisor._status import ACTIVE

        planned = set(plan.names()) | set(names)
        running = sorted(
            name
            for name, status in _supervised(backend).items()
            if status.state in ACTIVE and name not in planned
        )
        if running and origins:
            self.warnings.append(
                f"{', '.join(running)} {'runs' if len(running) == 1 else 'run'} under the "
                f"native supervisor outside the plan of role {plan.role}, and noderole's record "
                f"of the last apply cannot be read: kept, as {'they' if len(running) > 1 else 'it'}"
                f" may be plugin {', '.join(sorted(origins))}'s, which failed to load; "
                "`noderole stop` stops them with the whole role"
            )
            return []
        return running

    def _stop_left_out(self, plan: Plan, backend: Backend, names: list[str]) -> None:
        """Stop what the new plan no longer has, last started first, before it starts anything:
        once the plan is recorded, status and stop would not see them (a node changed from
        server to agent would run k3s server beside k3s agent)."""
        from noderole.supervisor._status import ACTIVE

        before = backend.status(names)
        running = [n for n in names if n in before and before[n].state in ACTIVE]
        if not running:
            return
        backend.stop(running)
        self.warnings.append(
            f"stopped {', '.join(running)}: no longer in the plan of role {plan.role} (the "
            "role changed, or no installed plugin defines them now)"
        )

    def _retiring(
        self, plan: Plan, backend: Backend, failures: Sequence[ServiceReport]
    ) -> list[Service]:
        """Under a backend that renders files (OpenRC, systemd), every service the recorded
        plan has and ``plan`` lacks, milestones too (see recorded.left_out_services): their
        runscripts or units, and the links that enable them, must go."""
        if getattr(backend, "retire", None) is None:
            return []
        from noderole.recorded import left_out_services

        origins, names = _kept_by(failures)
        return left_out_services(
            self.root, plan.names(), backend.name, origins=origins, names=names
        )

    def _retire(self, plan: Plan, backend: Backend, services: list[Service]) -> None:
        """Stop the milestones of ``services`` and remove the files the init system would start
        them from at the next boot (a node changed from server to agent would boot k3s server
        beside k3s agent); systemd is reloaded. A removal that fails is a warning: the apply
        goes on, and the file is named."""
        retire = getattr(backend, "retire", None)
        if retire is None:
            return
        try:
            removed: list[str] = retire(services)
        except NoderoleError as exc:
            self.warnings.append(
                f"{exc}; remove it by hand, or the next boot starts a service that is no longer "
                f"in the plan of role {plan.role}"
            )
            return
        if removed:
            self.warnings.append(
                f"removed {', '.join(removed)}: no longer in the plan of role {plan.role}"
            )

    def _record_role(
        self, plan: Plan, backend: Backend, failures: Sequence[ServiceReport] = ()
    ) -> None:
        """Record ``plan``'s role and the plan itself (each only when it changed); services
        left out because of a broken plugin (``failures``) stay recorded as they were."""
        from noderole.recorded import keeping, plan_data, write_plan
        from noderole.state import read_role, write_role

        if read_role(self.root) != plan.role:
            write_role(self.root, plan.role)
        # The init-system backends carry the path their files call; the native one needs none
        # (and reading the setting here would make apply depend on the configuration twice).
        noderole_path = str(getattr(backend, "noderole_path", "noderole"))
        data = plan_data(plan, backend=backend.name, noderole_path=noderole_path)
        origins, names = _kept_by(failures)
        write_plan(self.root, keeping(self.root, data, origins=origins, names=names))

    # ---------------------------------------------------------------- fleet metrics

    def metrics(self, plan: Plan, backend: Backend) -> str:
        """The Prometheus text exposition of ``plan``'s role (``status --format prometheus``)."""
        from noderole.metrics import role_metrics

        return role_metrics(plan, self.root, self.status_rows(plan, backend))

    def publish_metrics(self, plan: Plan, backend: Backend, report: ApplyReport | None) -> None:
        """Rewrite ``textfile_dir/noderole.prom`` when that is set (after an apply, whose
        outcome :meth:`apply` recorded, a renew, a stop or a restart).

        Under the native backend a running supervisor is handed the role-level families and
        writes the file itself, now and after every state change it sees (respawns, giving up);
        with no daemon running (everything stopped) the file is written here.
        """
        import sys

        from noderole import manifest

        written = []
        try:
            directory = self._textfile_dir()
            problem = textfile_dir_problem(directory)
            if problem:
                # As a directory that cannot be written: the services are up, say it and go on.
                print(f"noderole: warning: fleet metrics not written: {problem}", file=sys.stderr)
                directory = ""
            if directory:
                from noderole import metrics  # only when metrics are written

                local = self.root.resolve(directory)
                if not self._daemon_publishes(plan, backend, local):
                    metrics.write_textfile(local, self.metrics(plan, backend))
                written.append(f"{directory.rstrip('/')}/{metrics.TEXTFILE}")
        except OSError as exc:
            # The services are up: a metrics file that cannot be written must not fail the apply.
            print(f"noderole: warning: fleet metrics not written: {exc}", file=sys.stderr)
        manifest.record(self.root, "state", written)

    def _daemon_publishes(self, plan: Plan, backend: Backend, local: Path) -> bool:
        """Hand the native supervisor the file (True), or False when no daemon runs. Raises
        OSError when it could not write it (the directory named as :func:`write_textfile`
        does)."""
        from noderole import metrics
        from noderole.supervisor import SupervisorError

        supervisor = getattr(backend, "supervisor", None)
        if backend.name != "native" or supervisor is None:
            return False
        if not local.is_dir():
            metrics.write_textfile(local, "")  # raises, naming the setting and the fix
        head = metrics.role_head(
            apply=metrics.read_last_apply(self.root, plan.role),
            certificates=metrics.certificate_expiries(plan, self.root),
        ).text()
        names = [e.name for e in plan.services if e.service.command is not None]
        path = str(local / metrics.TEXTFILE)
        try:
            done = supervisor.publish_textfile(path, role=plan.role, names=names, head=head)
        except SupervisorError:
            return False  # a daemon of an older version: the file is written here
        if done is False:
            raise OSError(f"the native supervisor could not write {path}: see its log")
        return done is True

    def config_syntax_warning(self) -> str:
        """Why ``config.toml`` cannot be read at all ("" when it can, or is absent), found
        without loading a plugin: ``status`` and ``stop`` work from the recorded plan and never
        read the settings, yet the operator should hear that the next apply will refuse."""
        if "config" in self.__dict__:
            return ""  # loaded already: config_warning says it
        from noderole.tomlcache import read_config, unreadable

        try:
            text = read_config(self.root.local(CONFIG_PATH)).decode("utf-8")
            self._parse_config(text)
        except FileNotFoundError:
            return ""
        except OSError as exc:
            return f"{unreadable(exc)}; the next apply will refuse it"
        except ValueError as exc:  # not UTF-8, or not TOML
            return (
                f"{CONFIG_PATH}: not valid TOML: {exc}; the next apply will refuse it: fix it "
                "(noderole config check)"
            )
        return ""

    def _parse_config(self, text: str) -> dict[str, Any]:
        """``config.toml``'s ``text`` parsed, through the cache (no TOML parser when it holds
        this text); the same document for both readers of one command."""
        parsed: tuple[str, dict[str, Any]] | None = self.__dict__.get("_parsed_config")
        if parsed is not None and parsed[0] == text:
            return parsed[1]
        from noderole.tomlcache import CONFIG_CACHE, parse_config_text

        document = parse_config_text(text, self.root.local(CONFIG_CACHE))
        self.__dict__["_parsed_config"] = (text, document)
        return document

    def _textfile_dir(self) -> str:
        """``[noderole] textfile_dir``, read without loading plugins when none are loaded yet:
        ``stop`` and ``status`` work from the recorded plan and must not import a plugin."""
        if "config" in self.__dict__:
            return str(self.setting("textfile_dir"))
        from noderole.tomlcache import read_config

        try:
            document = self._parse_config(read_config(self.root.local(CONFIG_PATH)).decode("utf-8"))
        except (OSError, ValueError):
            return ""  # no file, or one `noderole config check` will explain: metrics stay off
        table = document.get("noderole")
        value = table.get("textfile_dir", "") if isinstance(table, dict) else ""
        return value if isinstance(value, str) else ""

    def _record_outcomes(self, plan: Plan, report: ApplyReport, *, whole: bool) -> None:
        """Record each service's outcome (kept for services this apply did not touch, as with
        ``restart`` of a few), the settings used, secret ones left out, and, for an apply of
        the ``whole`` role, its verdict and duration (the fleet metrics' apply series)."""
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
        try:
            entries = self.config.entries()
        except ConfigError:
            # An apply of a plan built elsewhere (the testing kit's): no settings to keep.
            entries = []
        for entry in entries:
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
                "ok": report.ok if whole else before.get("ok", report.ok),
                "seconds": report.seconds if whole else before.get("seconds", report.seconds),
            },
        )

    def dry_run(self, plan: Plan, backend: Backend) -> list[dict[str, Any]]:
        """What applying ``plan`` would do to each service, changing nothing (``--dry-run``)."""
        from noderole.dryrun import dry_run_report

        return dry_run_report(plan, backend, root=self.root, clock=self.clock)

    def stop(
        self,
        plan: Plan,
        names: Sequence[str],
        backend: Backend,
        *,
        lock_timeout: float = 300.0,
        strays: bool = False,
        told: Callable[[str, str], None] | None = None,
    ) -> tuple[list[str], dict[str, list[int]]]:
        """Stop ``names`` (in the order given) under the node lock, and first the running
        services that need them (:meth:`needing`; each told to ``told`` with why, before it
        stops); return those that had a process running (or respawning), so nobody is told a
        stopped service was stopped, and what was ended of a killed native supervisor's
        services (name -> pids: they had survived it, its watchdog killed with it; the
        supervisor started for the stop ended them, every one, not only those named).

        With ``strays`` (a stop of the whole role) under the native backend, what its
        supervisor runs outside ``plan`` is stopped first, too: services an apply could not
        tell were left out of the plan (its record of the last apply unreadable, a plugin that
        failed to load), which nothing else reaches but ``reset``."""
        from noderole.state import node_lock
        from noderole.supervisor._status import ACTIVE

        with node_lock(self.root, timeout=lock_timeout, clock=self.clock, what="stop"):
            if not strays:
                names = self._with_needing(plan, names, backend, told)
            processes = [n for n in names if plan[n].service.command is not None]
            stopping = processes
            milestones = getattr(backend, "milestones", None)
            if strays and milestones is not None:
                # A whole role under an init system: its milestones' units too, which stay
                # active once their steps ran (a reset then removed the file of an active unit).
                held = set(milestones([plan[n].service for n in names]))
                stopping = [n for n in names if n in held or plan[n].service.command is not None]
            outside: list[str] = []
            if strays and backend.name == "native":
                before = _supervised(backend)
                outside = sorted(n for n in before if n not in plan)
            else:
                before = backend.status(processes)
            _stop(backend, plan, stopping, first=outside)
            processes = outside + processes
            leftovers = dict(getattr(backend, "killed_leftovers", None) or {})
        self.publish_metrics(plan, backend, None)
        stopped = [
            n for n in processes if n in before and before[n].state in ACTIVE and n not in leftovers
        ]
        return stopped, leftovers

    def needing(self, plan: Plan, names: Sequence[str], backend: Backend) -> dict[str, str]:
        """The services of ``plan`` with a process running (or respawning) that ``need`` one of
        ``names``, directly or through others (:meth:`~noderole.plan.Plan.needed_by`), in stop
        order, each with why (``it needs hdep``): what ``stop`` and ``restart`` of ``names``
        stop first, as OpenRC and systemd stop what needs (``Requires=``) a stopped service,
        whichever backend runs them. The init system then finds them stopped already: nothing
        is stopped twice."""
        found = plan.needed_by(names)
        candidates = [n for n in found if plan[n].service.command is not None]
        if not candidates:
            return {}
        from noderole.backends import status_to_act_on
        from noderole.supervisor._status import ACTIVE

        # Asked as apply asks: a supervisor that does not answer fails the stop here (exit 10),
        # before anything is said to stop.
        current = status_to_act_on(backend, candidates)
        running = [n for n in candidates if n in current and current[n].state in ACTIVE]
        stopped = set(names) | set(running)
        return {name: _why_needed(plan, name, found, stopped) for name in running}

    def _with_needing(
        self,
        plan: Plan,
        names: Sequence[str],
        backend: Backend,
        told: Callable[[str, str], None] | None,
    ) -> list[str]:
        """``names`` and the running services that need them (:meth:`needing`, each told to
        ``told``), in stop order; ``names`` as given when nothing needs them."""
        needing = self.needing(plan, names, backend)
        if not needing:
            return list(names)
        for name, why in needing.items():
            if told is not None:
                told(name, why)
        return [n for n in plan.stop_order() if n in needing or n in names]

    def restart(
        self,
        plan: Plan,
        names: Sequence[str],
        backend: Backend,
        *,
        progress: Progress | None = None,
        lock_timeout: float = 300.0,
        told: Callable[[str, str], None] | None = None,
    ) -> ApplyReport:
        """Stop ``names``, and first the running services that need them (:meth:`needing`;
        each told to ``told`` with why), then apply them all again (pre-start steps included),
        what needs them after them: as OpenRC's ``rc-service NAME restart`` restarts the
        services that need NAME and were started, and systemd those that ``Requires=`` it."""
        from noderole.state import node_lock

        with node_lock(self.root, timeout=lock_timeout, clock=self.clock, what="restart"):
            names = self._with_needing(plan, names, backend, told)
            backend.stop([n for n in names if plan[n].service.command is not None])
        report = self.apply(
            plan.subset(names),
            backend,
            progress=progress,
            lock_timeout=lock_timeout,
            record_plan=False,
            publish=False,
        )
        self.publish_metrics(plan, backend, None)  # a restart is not an apply of the role
        return report

    # ---------------------------------------------------------------- status

    def status_rows(
        self, plan: Plan | RecordedView, backend: Backend, *, log_lines: int = 5
    ) -> list[dict[str, Any]]:
        """One row per process of ``plan``: state, pid, uptime, restarts, last exit, the log
        (only when the file exists), the last apply's outcome, and, for a failed or
        crash-looping service, the last ``log_lines`` lines of its log (secrets as ***)."""
        from noderole.state import read_last_apply

        entries = [e for e in plan.services if e.service.command is not None]
        current: Mapping[str, Any] = backend.status([e.name for e in entries])
        # The native supervisor holds the node but does not answer: nothing is supervised.
        unsupervised = getattr(backend, "unsupervised", None) is not None
        last = read_last_apply(self.root)
        outcomes = (last.get("services") or {}) if last.get("role") == plan.role else {}
        now = time.time()
        rows = []
        for entry in entries:
            status = current.get(entry.name)
            state = status.state if status is not None else "stopped"
            log = entry.service.output_log or entry.service.error_log
            local_log = self.root.local(log) if log else None
            exists = local_log is not None and os.path.isfile(local_log)
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
                    "uptime": _uptime(status, now) if state in _UP else None,
                    "restarts": getattr(status, "restarts", 0),
                    "last_exit": getattr(status, "last_exit", None),
                    "log": log if exists else None,
                    "reason": "" if reason == "not supervised" else reason,
                    "survivors": "survived it" in reason,
                    "needs_ready": entry.service.readiness is not None,
                    "unsupervised": unsupervised,
                    "last_apply": outcome,
                    "log_tail": (
                        _log_tail(local_log, log_lines, self._secrets(plan, entry.service))
                        if failing and exists and local_log is not None and log_lines
                        else []
                    ),
                }
            )
        return rows

    def _secrets(
        self, plan: Plan | RecordedView, service: Service | RecordedService
    ) -> list[str] | None:
        """The secret values of ``service``'s environment, to hide in what ``status`` shows; None
        when they cannot be known. A recorded plan keeps only their names: the values come from
        the plugins, loaded for this alone."""
        from noderole.records import Secret

        values = [v.reveal() for v in service.environment.values() if isinstance(v, Secret)]
        if all(values):
            return values
        try:
            defined = {s.name: s for s in self.services(plan.role)}
        except NoderoleError:
            return None
        if service.name not in defined:
            return None
        env = defined[service.name].environment
        return [v.reveal() for v in env.values() if isinstance(v, Secret)]

    def status(
        self,
        plan: Plan | RecordedView,
        backend: Backend,
        *,
        wait: bool = False,
        timeout: float = 300.0,
        log_lines: int = 5,
    ) -> tuple[list[dict[str, Any]], ExitCode]:
        """The status rows of ``plan`` and their verdict; with ``wait``, polled (on the clock)
        until the verdict is no longer "still starting" or ``timeout`` seconds have passed.

        A native supervisor that does not answer ends a wait at once (exit 10: nothing it
        would wait for can come), once it has had as long to answer as a start or stop gives."""
        if wait and backend.name == "native":
            from noderole.supervisor._protocol import HELLO_TIMEOUT

            cast("NativeBackend", backend).hello = HELLO_TIMEOUT
        deadline = self.clock.monotonic() + timeout
        rows = self.status_rows(plan, backend, log_lines=log_lines)
        verdict = status_verdict(rows)
        while wait and verdict == ExitCode.STARTING and self.clock.monotonic() < deadline:
            self.clock.sleep(0.1)
            rows = self.status_rows(plan, backend, log_lines=log_lines)
            verdict = status_verdict(rows)
        return rows, verdict

    # ---------------------------------------------------------------- renew, reset

    def renew(
        self,
        plan: Plan,
        backend: Backend,
        *,
        progress: Progress | None = None,
        lock_timeout: float = 300.0,
    ) -> ApplyReport:
        """Re-mint the due certificates of ``plan``'s running services and restart only those
        (:func:`noderole.renewal.renew`)."""
        from noderole.renewal import renew

        report = renew(
            plan,
            backend,
            root=self.root,
            clock=self.clock,
            readiness_timeout=float(self.setting("readiness_timeout")),
            progress=progress,
            lock_timeout=lock_timeout,
        )
        self.publish_metrics(plan, backend, None)  # the certificates' expiry moved
        return report

    def certificates(self, role: str) -> list[CertificateCheck]:
        """Every certificate ``role``'s services mint, with its verdict now (``cert check``)."""
        from noderole.renewal import role_certificates

        return role_certificates(self.plan(role), root=self.root, clock=self.clock)

    def reset(
        self,
        role: str | None,
        backend: Backend | None,
        *,
        purge: bool = False,
        dry_run: bool = False,
        lock_timeout: float = 300.0,
    ) -> ResetReport:
        """Stop ``role``'s services and remove what noderole wrote (:mod:`noderole.reset`)."""
        from noderole.reset import reset

        return reset(
            role,
            backend,
            root=self.root,
            clock=self.clock,
            plan_for=self.plan,
            purge=purge,
            dry_run=dry_run,
            lock_timeout=lock_timeout,
        )

    # ---------------------------------------------------------------- render

    def _native_runs(self) -> bool:
        """True when the recorded plan is the native supervisor's and its daemon answers."""
        from noderole.paths import RUN_DIR
        from noderole.recorded import recorded_backend

        if recorded_backend(self.root) != "native":
            return False
        from noderole.supervisor import Supervisor

        return Supervisor(self.root.local(RUN_DIR), timeout=5).daemon_pid() is not None

    def render(self, role: str, backend: str, *, static: bool = False) -> RenderResult:
        """Write ``backend``'s (openrc or systemd) files for every service of ``role``, remove
        what an earlier render wrote for services no longer in it, and record the role."""
        from noderole.render import render_openrc, render_systemd, sync_rendered
        from noderole.schedule import RENEW_SERVICE, periodic_files
        from noderole.state import write_role

        plan = self.plan(role)
        # The init system renews through its own periodic job, never the native loop service.
        services = [entry.service for entry in plan.services if entry.name != RENEW_SERVICE]
        noderole_path = self.noderole_path()
        if backend == "openrc":
            items = render_openrc(services, noderole_path=noderole_path, exec_mode=not static)
        elif backend == "systemd":
            items = render_systemd(services, noderole_path=noderole_path, exec_mode=not static)
        else:
            raise UsageError(f"cannot render for backend {backend!r}: use openrc or systemd")
        items += periodic_files(
            backend,
            noderole_path=noderole_path,
            jitter=float(self.setting("renew_jitter")),
            interval=float(self.setting("renew_interval")),
            root=self.root,
        )
        manifest = f"/var/lib/noderole/rendered-{backend}.json"
        changed, removed = sync_rendered(items, root=self.root, manifest=manifest)
        native = self._native_runs()
        rotated = ""
        if not native:
            # The program writes its log itself under OpenRC and systemd: copytruncate. While
            # the native supervisor runs the node, its apply keeps the file it needs.
            rotated = self._sync_logrotate(services, native=False)
        if rotated == "removed":
            removed = [*removed, LOGROTATE_FILE]
        if native:
            # Files for an image or a later switch: the node's services run under the native
            # supervisor now, and status and stop must go on reaching them through it.
            self.warnings.append(
                f"the native supervisor runs this node's services: the {backend} files are "
                "written, and the node's recorded role and plan stay the native ones (status and "
                f"stop reach them through it); run `noderole stop` before booting with {backend}"
            )
        else:
            write_role(self.root, role)
            from noderole.recorded import plan_data, write_plan

            write_plan(self.root, plan_data(plan, backend=backend, noderole_path=noderole_path))
        written = set(changed)
        shown = [item.path for item in items if self.root.resolve(item.path) in written]
        return RenderResult(
            items,
            changed=[*shown, LOGROTATE_FILE] if rotated == "written" else shown,
            removed=removed,
        )


def _why_needed(plan: Plan, name: str, found: Mapping[str, str], stopped: set[str]) -> str:
    """Why ``name`` stops with what it needs (``found``: :meth:`Plan.needed_by`'s): ``it needs
    hdep``; through a virtual name, ``it needs V, which hdep provides``; through services that
    are not stopped themselves (a milestone), each hop until one that is (``it needs
    k3s-cluster, which k3s-cluster-init provides, which needs net``)."""
    hops = []
    while True:
        via = found[name]
        planned = plan[name]
        virtual = next(
            (
                v
                for v, providers in planned.provided_by.items()
                if via in providers and v in planned.service.need
            ),
            None,
        )
        hops.append(f"{virtual}, which {via} provides" if virtual is not None else via)
        if via in stopped or via not in found:
            break
        name = via
    return "it needs " + ", which needs ".join(hops)


def _log_tail(path: str, lines: int, secrets: Sequence[str] | None) -> list[str]:
    """The last ``lines`` lines of ``path`` (read from its last 64 KiB), the service's secret
    values replaced by ***; nothing but a note when the secrets are unknown (None)."""
    if secrets is None:
        return [
            "(log not shown: the service has secrets and its plugin could not be loaded "
            "to hide them; read the log as root)"
        ]
    from noderole.supervisor._safeopen import UnsafePathError, read_tail

    try:
        # The log sits where the service's user may write: a link or a FIFO planted there is
        # neither read through nor waited on.
        text = read_tail(path, 65536).decode(errors="replace")
    except UnsafePathError as exc:
        return [f"(log not shown: {exc})"]
    except OSError:
        return []
    tail = text.splitlines()[-lines:]
    for secret in (s for s in secrets if s):
        tail = [line.replace(secret, "***") for line in tail]
    # Bounded in width too: a service that writes no newline made one line of 64 KiB.
    return [
        line
        if len(line) <= LOG_LINE_WIDTH
        else f"{line[:LOG_LINE_WIDTH]}... ({len(line) - LOG_LINE_WIDTH:,} more characters)"
        for line in tail
    ]


LOG_LINE_WIDTH = 1000
"""Characters of one log line ``status`` shows; the rest is counted."""


# ---------------------------------------------------------------- the logs' logrotate file
#
# k3s is chatty, and nothing else rotates its log: without this file /var/log fills, often on the
# file system that holds the datastore. Here, not in a module of its own: a re-apply that changes
# nothing builds the text and compares it with the file, and imports nothing more for it.
# What each backend needs so that no line is lost:
#
# - native: the supervisor writes the files (services write into pipes it copies) and reopens
#   every log on SIGHUP. `postrotate` sends it one through its pid file, once the process named
#   there is found to be the supervisor of /run/noderole (a pid file left by a killed daemon may
#   name another process by now); none running: nothing to do. `delaycompress`: the lines written
#   between the rename and the reopen land in LOG.1, which must not be compressed under them.
# - OpenRC and systemd: the program holds its file (supervise-daemon's output_log, `noderole exec`
#   under systemd), and nothing makes it open it again: `copytruncate`, as k3s's own install
#   script does for OpenRC.
#
# The file names node paths, as units do (under --root it is ROOT/etc/logrotate.d/noderole and
# names /var/log/k3s.log, what the node sees once it boots). It is recorded as rendered: reset
# removes it with the units, as kept logs would otherwise be aged out by it.

LOGROTATE_FILE = "/etc/logrotate.d/noderole"
"""The configuration (node path); logrotate reads every file of ``/etc/logrotate.d``."""

HEADER = "# Generated by noderole: the logs of the role's services, rewritten by apply.\n"
"""The first line (what render's check of a file's owner looks for)."""

_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@+=:,./-")
"""Characters logrotate reads literally in a bare file name."""

_REFUSED = frozenset("\"'\\*?[]{}")
"""Characters logrotate cannot take in a file name, quoted or not: a quote ends the name, a
backslash is kept, ``* ? [ ]`` make it a glob, a brace is read as the block's."""


class LogrotateConfig:
    """The configuration's text, or None when none is due, and what was left out of it."""

    __slots__ = ("left_out", "logs", "text")

    def __init__(
        self, text: str | None, left_out: Sequence[str] = (), logs: Sequence[str] = ()
    ) -> None:
        self.text = text
        """The file's content; None: no file (off, or no log to rotate)."""
        self.left_out = tuple(left_out)
        """One sentence per log path left out: the service, the path, why, and the fix."""
        self.logs = tuple(logs)
        """The log paths the file names."""


def logrotate_text(
    logs: Sequence[str],
    *,
    supervisor_run_dir: str | None,
    keep: int = 0,
    max_megabytes: int = 0,
) -> str:
    """The configuration for ``logs`` (paths as logrotate will see them, each one logrotate can
    take): with ``supervisor_run_dir`` (the native backend), a ``postrotate`` that sends SIGHUP
    to the supervisor of that run directory; without, ``copytruncate``. ``keep`` old copies
    (0: the system's default) and rotated past ``max_megabytes`` (0: no size bound)."""
    lines = [
        HEADER.rstrip("\n"),
        "# Settings: [noderole] logrotate, logrotate_keep and logrotate_max_megabytes in",
        "# /etc/noderole/config.toml; how often, and the rest: /etc/logrotate.conf.",
        " ".join(_name(log) for log in logs) + " {",
        "    missingok",
        "    notifempty",
    ]
    if keep:
        lines.append(f"    rotate {keep}")
    if max_megabytes:
        lines.append(f"    maxsize {max_megabytes}M")
    if supervisor_run_dir is None:
        lines += [
            "    # The program holds its log open: copied, then emptied in place.",
            "    copytruncate",
        ]
    else:
        pidfile = f"{supervisor_run_dir}/supervisor.pid"
        lines += [
            "    # The native supervisor writes the logs and reopens them on SIGHUP: nothing is",
            "    # lost; the lines written before it reopened go to LOG.1, compressed next time.",
            "    delaycompress",
            "    sharedscripts",
            "    postrotate",
            f"        pid=$(cat {_sh(pidfile)} 2>/dev/null) || exit 0",
            '        case "$pid" in ""|*[!0-9]*) exit 0 ;; esac',
            '        if tr "\\000" "\\n" <"/proc/$pid/cmdline" 2>/dev/null'
            f" | grep -qxF -e {_sh(supervisor_run_dir)}; then",
            '            kill -HUP "$pid" 2>/dev/null',
            "        fi",
            "        exit 0",
            "    endscript",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _name(path: str) -> str:
    """``path`` as logrotate reads it back: bare when plain, else double-quoted."""
    return path if set(path) <= _PLAIN else f'"{path}"'


def _sh(path: str) -> str:
    """``path`` as one sh word: bare when plain, else single-quoted."""
    return path if set(path) <= _PLAIN else "'" + path.replace("'", "'\\''") + "'"


def _refusal(path: str) -> str:
    """Why logrotate cannot take ``path`` ("" when it can)."""
    bad = sorted({c for c in path if c in _REFUSED or not c.isprintable()})
    if not bad:
        return ""
    return (
        f"logrotate cannot take {', '.join(repr(c) for c in bad)} in a file name (a quote, a "
        "backslash, a glob or brace character, a control character)"
    )


def logrotate_config(
    services: Iterable[Service],
    settings: Mapping[str, Any],
    *,
    native: bool,
) -> LogrotateConfig:
    """The configuration for the logs of ``services`` (those with a command), as ``[noderole]``
    ``settings`` ask, for the native backend (``native``) or an init system."""
    if not settings["logrotate"]:
        return LogrotateConfig(None)
    logs: dict[str, None] = {}
    left_out: list[str] = []
    for service in services:
        if service.command is None:
            continue
        for attribute in ("output_log", "error_log"):
            path = getattr(service, attribute)
            if not path or path in logs:
                continue
            refusal = _refusal(path)
            if refusal:
                left_out.append(
                    f"{LOGROTATE_FILE} leaves out {path!r}, service {service.name}'s "
                    f"{attribute}: {refusal}; give the service a log path without them, or "
                    "rotate that log with a logrotate file of your own"
                )
            else:
                logs[path] = None
    if not logs:
        return LogrotateConfig(None, left_out)
    from noderole.paths import RUN_DIR  # loaded already by an apply's state files

    text = logrotate_text(
        list(logs),
        supervisor_run_dir=RUN_DIR if native else None,
        keep=int(settings["logrotate_keep"]),
        max_megabytes=int(settings["logrotate_max_megabytes"]),
    )
    return LogrotateConfig(text, left_out, list(logs))


def _held(local: str) -> bytes | None:
    """What the regular file at ``local`` holds (None: nothing there, no regular file, a link)."""
    from noderole.reading import read_regular_file  # loaded already by an apply's records

    try:
        return read_regular_file(local, follow_symlinks=False)[0]
    except OSError:
        return None


def _named_elsewhere(root: NodeRoot, logs: Sequence[str]) -> list[str]:
    """A warning per other file of ``/etc/logrotate.d`` that names one of ``logs`` too (the
    ``/etc/logrotate.d/k3s`` k3s's install script writes for OpenRC): logrotate refuses a log
    named twice ("duplicate log entry") and exits 1 at every run."""
    from noderole.reading import read_regular_file

    directory = root.local(os.path.dirname(LOGROTATE_FILE))
    mine = os.path.basename(LOGROTATE_FILE)
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    found = []
    for name in names:
        if name == mine:
            continue
        try:
            text = read_regular_file(os.path.join(directory, name), follow_symlinks=False)[0]
        except OSError:
            continue
        words = set(text.decode(errors="replace").replace('"', " ").replace("'", " ").split())
        for log in logs:
            if log in words:
                other = f"{os.path.dirname(LOGROTATE_FILE)}/{name}"
                found.append(
                    f"{other} names {log} too, which {LOGROTATE_FILE} rotates: logrotate refuses "
                    f"a log named twice (duplicate log entry) and exits 1 at every run; remove "
                    f"{other} (k3s's install script writes one), or set [noderole] logrotate = "
                    "false to keep it"
                )
    return found


def sync_logrotate(root: NodeRoot, text: str | None) -> str:
    """Make ``LOGROTATE_FILE`` under ``root`` hold ``text`` (None: remove the one noderole wrote,
    if it still holds what noderole wrote). Returns what changed: ``written``, ``removed`` or
    ``""``. Compares first: a file that holds ``text`` already is neither written nor recorded
    again, and nothing more is imported. Raises :class:`~noderole.errors.BackendError` naming
    the file when it cannot be written, or is not noderole's to replace."""
    local = root.local(LOGROTATE_FILE)
    held = _held(local)
    if text is None:
        if held is None and not os.path.lexists(local):
            return ""
        from noderole.render import remove_rendered

        if not remove_rendered([LOGROTATE_FILE], root=root):
            return ""
        from noderole.manifest import forget

        forget(root, [LOGROTATE_FILE])
        return "removed"
    if held == text.encode():
        return ""
    from noderole.render import RenderedFile, write_rendered

    write_rendered([RenderedFile(path=LOGROTATE_FILE, content=text, mode=0o644)], root=root)
    return "written"


def textfile_dir_problem(directory: str) -> str:
    """Why ``[noderole] textfile_dir`` cannot be used ("" when it can, or is empty: off)."""
    from noderole.root import climbs_out

    if not directory or (directory.startswith("/") and not climbs_out(directory)):
        return ""
    return (
        f"{CONFIG_PATH}:noderole.textfile_dir: {directory!r} is not an absolute path within the "
        "node: set node_exporter's textfile collector directory, e.g. "
        '/var/lib/node-exporter/textfile, or "" for no fleet metrics'
    )


def status_verdict(rows: Sequence[Mapping[str, Any]]) -> ExitCode:
    """0 all up, 1 some failed, 11 still starting (like ``cloud-init status``); 10 whatever
    the rows say when the native supervisor does not answer: nothing is supervised."""
    if any(r.get("unsupervised") for r in rows):
        return ExitCode.BACKEND
    if any(r["state"] in ("crashed", "stopped") for r in rows):
        return ExitCode.FAILED
    if all(
        r["state"] == "ready" or (r["state"] == "running" and not r["needs_ready"]) for r in rows
    ):
        return ExitCode.OK
    return ExitCode.STARTING


def _damaged_role_record(damage: str, command: str) -> UsageError:
    """The error of a command the recorded role decides, when the record cannot be read."""
    from noderole.paths import ROLE_FILE

    return UsageError(
        f"no role given, and {ROLE_FILE} is damaged ({damage}): noderole cannot tell this "
        f"node's role from it. Give the role ({command} ROLE); `noderole apply ROLE` records "
        "it anew"
    )


def _uptime(status: Any, now: float) -> float | None:
    """How long the service's process has run, on a clock no step of the wall clock moves (NTP
    setting the time at boot; a board without a clock of its own starts in 1970): since its
    start in clock ticks after boot (the native supervisor's ``start_ticks``, from
    ``/proc/PID/stat``) against ``/proc/uptime``, or since its fork on the monotonic clock
    (systemd's ``ExecMainStartTimestampMonotonic``). Else from the start the backend recorded on
    the wall clock, never below zero. None when no start is known."""
    ticks = getattr(status, "start_ticks", None)
    forked = getattr(status, "started_monotonic", None)
    since: float | None = None
    if ticks is not None:
        booted = _seconds_since_boot()
        if booted is not None:
            since = booted - ticks / os.sysconf("SC_CLK_TCK")
    elif forked is not None:
        since = time.monotonic() - forked
    if since is None:
        started_at = getattr(status, "started_at", None)
        if not started_at:
            return None
        since = now - started_at
    return round(max(0.0, since), 1)


def _seconds_since_boot() -> float | None:
    """``/proc/uptime``'s first figure (the clock ``/proc/PID/stat``'s start times count on)."""
    try:
        fd = os.open("/proc/uptime", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return float(os.read(fd, 128).split()[0])
        finally:
            os.close(fd)
    except (OSError, ValueError, IndexError):
        return None


def _require_running(backend: str) -> None:
    """BackendError when ``backend`` is systemd and systemd does not run this machine."""
    if backend == "systemd" and not os.path.isdir(SYSTEMD_RUNNING):
        from noderole.errors import BackendError

        raise BackendError(
            f"backend systemd needs a running systemd, and {SYSTEMD_RUNNING} does not exist: "
            "is systemd the init system of this machine? Use --backend native otherwise"
        )


def _kept_by(failures: Sequence[ServiceReport]) -> tuple[list[str], list[str]]:
    """The plugins (origins) and services an apply went on without (a broken plugin): their
    recorded services stay recorded, neither started nor stopped."""
    if not failures:
        return [], []
    from noderole.partial import PLUGIN_PREFIX  # a broken plugin: rare, loaded only then

    failed = [f.name for f in failures]
    origins = [n.removeprefix(PLUGIN_PREFIX) for n in failed if n.startswith(PLUGIN_PREFIX)]
    return origins, [n for n in failed if not n.startswith(PLUGIN_PREFIX)]


def _supervised(backend: Backend) -> Mapping[str, Any]:
    """Every service the native ``backend``'s supervisor knows, by name, with its status."""
    return cast("NativeBackend", backend).status(None)


def _stop(backend: Backend, plan: Plan, names: Sequence[str], *, first: Sequence[str] = ()) -> None:
    """Stop ``first`` (together), then ``names`` of ``plan`` in stop order: under the native
    backend, the services of a wave together (one ``stop_timeout`` per wave, not one per
    service that ignores its stop signal)."""
    from noderole.backends import stop_in_waves

    waves = plan.stop_waves(names)
    stop_in_waves(backend, [*first, *names], [list(first), *waves] if first else waves)
