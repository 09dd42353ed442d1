"""The dependency graph: which services a role starts, and in which order.

:func:`build_plan` turns every service the plugins returned into a :class:`Plan` for one role,
following OpenRC's dependency words and making its implicit choices explicit:

* the role's services (``roles`` contains the role) are the seed;
* ``need X`` and ``want X`` pull X into the plan even when X is not in the role; a need that nothing
  satisfies is a :class:`~noderole.errors.PlanError`, a want that nothing satisfies is ignored;
* ``use``, ``after`` and ``before`` only order services that are in the plan anyway;
* ``provide V`` makes V a virtual name. A reference to V means every provider of V in the plan
  (OpenRC's ``rc_depend_strict=YES``). When ``need V``/``want V`` finds no provider in the role,
  every known provider is pulled in. A real service name always wins over a virtual name of the
  same spelling;
* a cycle, however it is formed, is refused with the whole cycle printed (OpenRC cuts one silently);
* wave 0 holds services that wait for nothing, wave n those whose latest predecessor is in wave n-1.

Everything is iterative (breadth-first closure, Kahn's algorithm for the waves, a predecessor walk
to find a cycle): 10,000 services plan in a fraction of a second, time grows about linearly, and
nothing hits the recursion limit.
docs/concepts/dependencies.md explains the rules next to OpenRC's and systemd's.
"""

from __future__ import annotations

import gc
import itertools
import types
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs

from noderole.errors import PlanError
from noderole.records import Service, unknown_names

__all__ = ["KINDS", "Kind", "Plan", "PlannedService", "build_plan"]

Kind: TypeAlias = Literal["need", "want", "use", "after", "before"]
"""A dependency word, as a service declares it."""

KINDS: Final[tuple[Kind, ...]] = ("need", "want", "use", "after", "before")
"""Every dependency word, strongest first (the order a renderer picks an edge's label in)."""

# The words that make a service wait for its targets; ``before`` makes the *targets* wait instead.
_AFTER_KINDS: Final[tuple[Kind, ...]] = ("need", "want", "use", "after")


_NO_NAMES: Final[Mapping[str, tuple[str, ...]]] = types.MappingProxyType({})


def _frozen_names(value: Mapping[str, Iterable[str]]) -> Mapping[str, tuple[str, ...]]:
    if not value:
        return _NO_NAMES  # most services have no virtual or unresolved names: share one mapping
    if isinstance(value, types.MappingProxyType):
        return value  # built by build_plan itself, already of tuples
    return types.MappingProxyType({key: tuple(names) for key, names in value.items()})


def _frozen_services(value: Iterable[PlannedService]) -> tuple[PlannedService, ...]:
    return tuple(value)


def _frozen_waves(value: Iterable[Iterable[str]]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(wave) for wave in value)


@attrs.frozen(kw_only=True)
class PlannedService:
    """One service of a plan, with its dependencies resolved to the services actually planned."""

    service: Service
    """The record the plugin returned (``service.origin`` names the plugin)."""
    wave: int
    """Start wave: 0 waits for nothing; n waits for something in wave n-1 and nothing later."""
    in_role: bool
    """True when the service's ``roles`` name the plan's role; False when another pulled it in."""
    pulled_in_by: str | None
    """The first planned service whose ``need``/``want`` pulled this one in; None if in the role."""
    needs: tuple[str, ...]
    """Planned services this one needs, with virtual names replaced by their planned providers."""
    wants: tuple[str, ...]
    """Planned services this one wants (wanted names that match nothing are in ``unresolved``)."""
    uses: tuple[str, ...]
    """Planned services this one uses (order only)."""
    after: tuple[str, ...]
    """Every planned service this one starts after, for any reason (need, want, use, after, and
    other services' ``before``), sorted by name."""
    provided_by: Mapping[str, tuple[str, ...]] = attrs.field(converter=_frozen_names)
    """Virtual name this service refers to -> the planned providers it stands for here."""
    resolved: Mapping[str, tuple[str, ...]] = attrs.field(converter=_frozen_names)
    """Dependency word -> the planned services its declared names resolved to, in declared order
    (for ``before``: the services that start after this one because of it)."""
    unresolved: Mapping[str, tuple[str, ...]] = attrs.field(converter=_frozen_names)
    """Dependency word -> the declared names that matched nothing in the plan (ignored, by rule)."""

    @property
    def name(self) -> str:
        """The service's name."""
        return self.service.name


@attrs.frozen(kw_only=True)
class Plan:
    """The services a role starts, in start order, grouped into waves.

    Services of one wave may start together; each waits only for services of earlier waves.
    """

    role: str
    """The role this plan applies."""
    services: tuple[PlannedService, ...] = attrs.field(converter=_frozen_services)
    """Every planned service in start order: wave by wave, by name within a wave."""
    waves: tuple[tuple[str, ...], ...] = attrs.field(converter=_frozen_waves)
    """Service names per wave, each wave sorted by name."""
    warnings: tuple[str, ...] = ()
    """Problems that do not stop the plan (a dependency name no service has, with a suggestion)."""
    _by_name: Mapping[str, PlannedService] = attrs.field(init=False, repr=False, eq=False)
    _dependents: Mapping[str, tuple[str, ...]] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        by_name = {planned.name: planned for planned in self.services}
        dependents: dict[str, list[str]] = {name: [] for name in by_name}
        for planned in self.services:  # start order, so each list comes out in start order too
            for predecessor in planned.after:
                dependents[predecessor].append(planned.name)
        # Frozen class: these caches are derived from the fields, never set by a caller.
        object.__setattr__(self, "_by_name", types.MappingProxyType(by_name))
        object.__setattr__(
            self,
            "_dependents",
            types.MappingProxyType({name: tuple(deps) for name, deps in dependents.items()}),
        )

    def __getitem__(self, name: str) -> PlannedService:
        """The planned service called ``name``; KeyError when it is not in the plan."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"service {name!r} is not in the plan for role {self.role!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[PlannedService]:
        return iter(self.services)

    def __len__(self) -> int:
        return len(self.services)

    def names(self) -> tuple[str, ...]:
        """Service names in start order."""
        return tuple(planned.name for planned in self.services)

    def dependents(self, name: str) -> tuple[str, ...]:
        """Services that start after ``name`` for any reason (need, want, use, after, its
        ``before``), in start order: the ones to stop first when ``name`` stops."""
        self[name]  # a clear KeyError for a name outside the plan
        return self._dependents[name]

    def stop_order(self) -> tuple[str, ...]:
        """Service names in stop order: start order reversed, so dependents stop first."""
        return tuple(reversed(self.names()))

    def subset(self, names: Iterable[str]) -> Plan:
        """A plan of just ``names``, for acting on some services of an applied role (``restart``).

        Each service's ``after`` keeps only services of the subset (the others are running and
        stay so, so nothing waits for them); start order and waves are recomputed from what
        remains. ``needs``, ``wants`` and ``uses`` still say what was declared. Raises KeyError
        for a name that is not in this plan.
        """
        wanted = set(names)
        for name in wanted:
            self[name]  # a clear KeyError for a name outside the plan
        kept = [planned for planned in self.services if planned.name in wanted]
        predecessors = {p.name: {d for d in p.after if d in wanted} for p in kept}
        waves = _waves(predecessors)
        by_name = {planned.name: planned for planned in kept}
        services = [
            attrs.evolve(by_name[name], wave=number, after=tuple(sorted(predecessors[name])))
            for number, wave in enumerate(waves)
            for name in wave
        ]
        return Plan(role=self.role, services=services, waves=waves)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data (``noderole plan --json``); secrets are shown as ``***``."""
        return {
            "role": self.role,
            "waves": [list(wave) for wave in self.waves],
            "services": [_service_dict(planned) for planned in self.services],
            "warnings": list(self.warnings),
        }


def _service_dict(planned: PlannedService) -> dict[str, Any]:
    service = planned.service
    dependencies: dict[str, Any] = {
        kind: {
            "declared": list(getattr(service, kind)),
            "resolved": list(planned.resolved.get(kind, ())),
            "unresolved": list(planned.unresolved.get(kind, ())),
        }
        for kind in KINDS
    }
    return {
        "name": service.name,
        "origin": service.origin,
        "description": service.description,
        "roles": list(service.roles),
        "wave": planned.wave,
        "in_role": planned.in_role,
        "pulled_in_by": planned.pulled_in_by,
        **dependencies,
        "provide": list(service.provide),
        "provided_by": {name: list(providers) for name, providers in planned.provided_by.items()},
        "starts_after": list(planned.after),
        "pre_start": [step.describe() for step in service.pre_start],
        "command": None if service.command is None else list(service.command),
        # str() of a Secret is "***": the plan is printed and logged, secrets never are.
        "environment": {key: str(value) for key, value in service.environment.items()},
        "user": service.user,
        "group": service.group,
        "working_directory": service.working_directory,
        "pidfile": service.pidfile,
        "logs": {"output": service.output_log, "error": service.error_log},
        "supervision": attrs.asdict(service.supervision),
        "readiness": None if service.readiness is None else service.readiness.describe(),
    }


# --------------------------------------------------------------------------- building


def build_plan(services: Iterable[Service], role: str, *, plugins: Sequence[str] = ()) -> Plan:
    """Order the services of ``role`` (and everything they need or want) into a :class:`Plan`.

    ``services`` is every service every loaded plugin returned; ``plugins`` names the installed
    plugins, for error messages. Raises :class:`~noderole.errors.PlanError` for a service name
    defined twice, an unknown role, a need nothing satisfies, or a dependency cycle.
    """
    # Building a plan allocates a few containers per service and makes no reference cycles; with
    # the cyclic collector on, each of its full passes walks every object already allocated, so
    # plan time grew faster than the graph (13-17x per tenfold step past 10,000 services).
    paused = gc.isenabled()
    gc.disable()
    try:
        return _build_plan(services, role, plugins)
    finally:
        if paused:
            gc.enable()


def _build_plan(services: Iterable[Service], role: str, plugins: Sequence[str]) -> Plan:
    graph = _Graph(services, plugins)
    seed = graph.seed(role)
    members, pulled_in_by = graph.closure(seed, role)
    predecessors, planned_parts = graph.resolve(members)
    waves = _waves(predecessors)
    if sum(len(wave) for wave in waves) < len(predecessors):
        raise PlanError(graph.describe_cycle(_find_cycle(predecessors, waves), role))

    planned: list[PlannedService] = []
    for number, wave in enumerate(waves):
        for name in wave:
            resolved, unresolved, provided_by = planned_parts[name]
            planned.append(
                PlannedService(
                    service=graph.by_name[name],
                    wave=number,
                    in_role=name in seed,
                    pulled_in_by=pulled_in_by.get(name),
                    needs=resolved.get("need", ()),
                    wants=resolved.get("want", ()),
                    uses=resolved.get("use", ()),
                    after=tuple(sorted(predecessors[name])),
                    provided_by=provided_by,
                    resolved=resolved,
                    unresolved=unresolved,
                )
            )
    warnings = unknown_names((p.service for p in planned), graph.by_name.values())
    return Plan(role=role, services=planned, waves=waves, warnings=tuple(warnings))


_Parts: TypeAlias = tuple[
    Mapping[str, tuple[str, ...]], Mapping[str, tuple[str, ...]], Mapping[str, tuple[str, ...]]
]
"""What resolving one service's declarations produced: resolved, unresolved, provided_by."""


class _Graph:
    """Every known service and virtual name, and the rules that resolve a declared name."""

    def __init__(self, services: Iterable[Service], plugins: Sequence[str]) -> None:
        self.plugins = tuple(plugins)
        self.by_name: dict[str, Service] = {}
        for service in services:
            first = self.by_name.setdefault(service.name, service)
            if first is not service:
                raise PlanError(_duplicate_message(service.name, first.origin, service.origin))
        providers: dict[str, list[str]] = {}
        for service in self.by_name.values():
            for virtual in service.provide:
                # A real service of the same name wins: the virtual spelling is never consulted.
                if virtual not in self.by_name:
                    providers.setdefault(virtual, []).append(service.name)
        self.providers: dict[str, tuple[str, ...]] = {
            virtual: tuple(sorted(set(names))) for virtual, names in providers.items()
        }

    # ----------------------------------------------------------------- the role and its closure

    def seed(self, role: str) -> frozenset[str]:
        """Names of the services whose ``roles`` contain ``role``."""
        seed = frozenset(name for name, svc in self.by_name.items() if role in svc.roles)
        if not seed:
            known = sorted({r for svc in self.by_name.values() for r in svc.roles})
            raise PlanError(
                f"unknown role {role!r}; known roles: {', '.join(known) or '(none)'}. "
                f"No service of the installed plugins ({self._plugin_list()}) declares role "
                f"{role!r}: pass one of the known roles, or install the plugin that defines it."
            )
        return seed

    def closure(self, seed: frozenset[str], role: str) -> tuple[set[str], dict[str, str]]:
        """The seed plus everything it needs or wants, transitively; and who pulled each one in."""
        members = set(seed)
        pulled_in_by: dict[str, str] = {}
        missing: list[tuple[str, str]] = []
        # Which providers a virtual pulls in depends on the seed only, never on visiting order,
        # so the plan is the same whatever order the plugins returned their services in.
        pulls: dict[str, tuple[str, ...]] = {}
        queue = deque(sorted(seed))
        while queue:
            name = queue.popleft()
            service = self.by_name[name]
            for kind in ("need", "want"):
                for target in getattr(service, kind):
                    found = pulls.get(target)
                    if found is None:
                        found = pulls[target] = self._pull_targets(target, seed)
                    if not found and kind == "need":
                        missing.append((name, target))
                    for other in found:
                        if other not in members:
                            members.add(other)
                            pulled_in_by[other] = name
                            queue.append(other)
        if missing:
            raise PlanError(self._missing_message(missing, pulled_in_by, role))
        return members, pulled_in_by

    def _pull_targets(self, target: str, seed: frozenset[str]) -> tuple[str, ...]:
        if target in self.by_name:
            return (target,)
        providers = self.providers.get(target, ())
        in_role = tuple(p for p in providers if p in seed)
        # Providers in the role are enough (and all of them run anyway); with none in the role,
        # every known provider is pulled in: strict, like rc_depend_strict, and never a guess.
        return in_role or providers

    def _missing_message(
        self, missing: list[tuple[str, str]], pulled_in_by: dict[str, str], role: str
    ) -> str:
        missing.sort()
        name, target = missing[0]
        why = (
            f"{name} is in role {role!r}"
            if name not in pulled_in_by
            else f"{name} is in the plan because {' ← '.join(_chain(name, pulled_in_by))}"
        )
        message = (
            f"{name} needs {target}, which no installed plugin provides "
            f"(installed plugins: {self._plugin_list()}). No service is called {target!r} and "
            f"none provides it; {why}. Install or enable a plugin that defines {target!r}, or "
            f"remove {target!r} from the need of {name} (use 'want' if it is optional)."
        )
        others = [f"{n} needs {t}" for n, t in missing[1:]]
        if others:
            message += f" Also unsatisfied: {'; '.join(others)}."
        return message

    def _plugin_list(self) -> str:
        return ", ".join(self.plugins) if self.plugins else "none"

    # ----------------------------------------------------------------- resolution and edges

    def resolve(self, members: set[str]) -> tuple[dict[str, set[str]], dict[str, _Parts]]:
        """Each member's predecessors (who it starts after), and its resolved declarations."""
        by_name = self.by_name
        # Walk in the plugins' order, not the set's hash order: the records were allocated in that
        # order, so memory is read mostly in sequence, which matters once the graph outgrows caches.
        ordered = [(name, svc) for name, svc in by_name.items() if name in members]
        predecessors: dict[str, set[str]] = {name: set() for name, _ in ordered}
        parts: dict[str, _Parts] = {}
        # A name resolves the same way for every service that declares it: resolve it once.
        cache: dict[str, tuple[str, ...]] = {}
        for name, service in ordered:
            resolved: dict[str, tuple[str, ...]] = {}
            unresolved: dict[str, tuple[str, ...]] = {}
            provided_by: dict[str, tuple[str, ...]] = {}
            own_predecessors = predecessors[name]
            declarations = (service.need, service.want, service.use, service.after, service.before)
            for kind, declared in zip(KINDS, declarations, strict=True):
                if not declared:
                    continue
                found_all: list[str] = []
                missing: list[str] = []
                for target in declared:
                    found = cache.get(target)
                    if found is None:
                        found = cache[target] = self._in_plan(target, members)
                    if not found:
                        missing.append(target)
                        continue
                    if target not in by_name:
                        provided_by[target] = found
                    found_all.extend(found)
                    if kind == "before":
                        for other in found:
                            predecessors[other].add(name)
                    else:
                        own_predecessors.update(found)
                if found_all:
                    resolved[kind] = tuple(dict.fromkeys(found_all))
                if missing:
                    unresolved[kind] = tuple(missing)
            parts[name] = (
                _frozen_names(resolved),
                _frozen_names(unresolved),
                _frozen_names(provided_by),
            )
        return predecessors, parts

    def _in_plan(self, target: str, members: set[str]) -> tuple[str, ...]:
        if target in self.by_name:
            return (target,) if target in members else ()
        return tuple(p for p in self.providers.get(target, ()) if p in members)

    # ----------------------------------------------------------------- cycles

    def describe_cycle(self, cycle: list[str], role: str) -> str:
        """One paragraph naming every node and every declaration of a cycle.

        ``cycle`` is ``[a, b, ..., a]`` where each service starts after the next one.
        """
        nodes = [cycle[0]]
        clauses: list[str] = []
        for waiter, waited in itertools.pairwise(cycle):
            reasons = self._edge_reasons(waiter, waited)
            # Show the virtual name as a node when the edge exists only through it.
            direct = [r for r in reasons if r[2] is None or r[0] == "before"]
            if not direct:
                nodes.append(reasons[0][2] or "")
            nodes.append(waited)
            clauses.extend(self._reason_text(waiter, waited, r) for r in reasons)
        return (
            f"dependency cycle in role {role!r}: {' → '.join(nodes)} "
            f"({'; '.join(dict.fromkeys(clauses))}). Each service would have to start before "
            "itself. noderole refuses a cycle rather than cutting it silently as OpenRC does (or "
            "dropping a unit as systemd does): remove or change one of these declarations."
        )

    def _edge_reasons(self, waiter: str, waited: str) -> list[tuple[Kind, str, str | None]]:
        """Why ``waiter`` starts after ``waited``: (kind, declared name, virtual or None)."""
        reasons: list[tuple[Kind, str, str | None]] = []
        svc = self.by_name[waiter]
        for kind in _AFTER_KINDS:
            for target in getattr(svc, kind):
                if target == waited:
                    reasons.append((kind, target, None))
                elif target not in self.by_name and waited in self.providers.get(target, ()):
                    reasons.append((kind, target, target))
        for target in self.by_name[waited].before:
            if target == waiter:
                reasons.append(("before", target, None))
            elif target not in self.by_name and waiter in self.providers.get(target, ()):
                reasons.append(("before", target, target))
        # Direct declarations first, so a path goes through a virtual only when it must.
        reasons.sort(key=lambda r: (r[2] is not None, KINDS.index(r[0])))
        return reasons

    @staticmethod
    def _reason_text(waiter: str, waited: str, reason: tuple[Kind, str, str | None]) -> str:
        kind, target, virtual = reason
        if kind == "before":
            if virtual is None:
                return f"{waited} starts before {waiter}"
            return f"{waited} starts before {virtual}, which {waiter} provides"
        verb = {"need": "needs", "want": "wants", "use": "uses", "after": "starts after"}[kind]
        text = f"{waiter} {verb} {target}"
        return text if virtual is None else f"{text}; {virtual} is provided by {waited}"


def _chain(name: str, pulled_in_by: Mapping[str, str]) -> list[str]:
    """``[name, parent, grandparent, ...]`` up to a service of the role."""
    chain = [name]
    while chain[-1] in pulled_in_by:
        chain.append(pulled_in_by[chain[-1]])
    return chain


def _duplicate_message(name: str, first: str, second: str) -> str:
    def label(origin: str) -> str:
        return f"plugin {origin!r}" if origin else "an unnamed plugin"

    if first == second:
        return (
            f"service {name!r} is defined twice by {label(first)}; a service name must be "
            "unique: fix the plugin, or disable it with --disable-plugin NAME"
        )
    return (
        f"service {name!r} is defined by both {label(first)} and {label(second)}; "
        "disable one with --disable-plugin NAME"
    )


def _waves(predecessors: Mapping[str, set[str]]) -> list[tuple[str, ...]]:
    """Kahn's algorithm, one wave at a time; services left out of every wave lie on or after a
    cycle."""
    successors: dict[str, list[str]] = {name: [] for name in predecessors}
    waiting: dict[str, int] = {}
    for name, before_me in predecessors.items():
        waiting[name] = len(before_me)
        for predecessor in before_me:
            successors[predecessor].append(name)
    current = sorted(name for name, count in waiting.items() if count == 0)
    waves: list[tuple[str, ...]] = []
    while current:
        waves.append(tuple(current))
        ready: list[str] = []
        for name in current:
            for successor in successors[name]:
                waiting[successor] -= 1
                if waiting[successor] == 0:
                    ready.append(successor)
        current = sorted(ready)
    return waves


def _find_cycle(
    predecessors: Mapping[str, set[str]], waves: Sequence[tuple[str, ...]]
) -> list[str]:
    """A shortest cycle through a node that Kahn's algorithm could not place, as ``[a, ..., a]``.

    Every unplaced service has an unplaced predecessor, so walking predecessors from any of them
    must revisit a node: that node lies on a cycle. A breadth-first search from it then finds the
    shortest way back, which makes the message as short as the problem allows.
    """
    placed = {name for wave in waves for name in wave}
    left = {name for name in predecessors if name not in placed}

    def step(name: str) -> list[str]:
        return sorted(p for p in predecessors[name] if p in left)

    seen: set[str] = set()
    node = min(left)
    while node not in seen:
        seen.add(node)
        node = step(node)[0]
    start = node
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in step(node):
            if nxt == start:
                path = [start]
                while node != start:
                    path.append(node)
                    node = parent[node]
                path.append(start)
                # ``path`` was built backwards from the last node; the first hop leaves start.
                return [start, *reversed(path[1:-1]), start]
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError("unplaced services without a cycle")  # pragma: no cover
