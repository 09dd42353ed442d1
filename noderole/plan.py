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

Everything is iterative (breadth-first closure, a depth-first walk over predecessors for the waves,
a predecessor walk to find a cycle), so nothing hits the recursion limit; and everything is linear
in services plus declarations. Services are numbered in name order and each declared name is looked
up once; every later step reads lists indexed by number, in number order, so a graph of 100,000
services does not turn each step into a CPU cache miss.
docs/concepts/dependencies.md explains the rules next to OpenRC's and systemd's.
"""

from __future__ import annotations

import gc
import itertools
import operator
import types
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

from noderole import recordclass
from noderole.errors import PlanError
from noderole.records import RecordBase, Service, unknown_names

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


@recordclass.frozen(kw_only=True, repr=False, eq=False)
class PlannedService(RecordBase):
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
    provided_by: Mapping[str, tuple[str, ...]] = recordclass.field(converter=_frozen_names)
    """Virtual name this service refers to -> the planned providers it stands for here."""
    resolved: Mapping[str, tuple[str, ...]] = recordclass.field(converter=_frozen_names)
    """Dependency word -> the planned services its declared names resolved to, in declared order
    (for ``before``: the services that start after this one because of it)."""
    unresolved: Mapping[str, tuple[str, ...]] = recordclass.field(converter=_frozen_names)
    """Dependency word -> the declared names that matched nothing in the plan (ignored, by rule)."""

    @property
    def name(self) -> str:
        """The service's name."""
        return self.service.name


@recordclass.frozen(kw_only=True, repr=False, eq=False)
class Plan(RecordBase):
    """The services a role starts, in start order, grouped into waves.

    Services of one wave may start together; each waits only for services of earlier waves.
    """

    role: str
    """The role this plan applies."""
    services: tuple[PlannedService, ...] = recordclass.field(converter=_frozen_services)
    """Every planned service in start order: wave by wave, by name within a wave."""
    waves: tuple[tuple[str, ...], ...] = recordclass.field(converter=_frozen_waves)
    """Service names per wave, each wave sorted by name."""
    warnings: tuple[str, ...] = ()
    """Problems that do not stop the plan (a dependency name no service has, with a suggestion)."""
    # Indexes derived from the fields, built on first use: a plan that is only printed (``noderole
    # plan``) never pays for them. Frozen class: set once through object.__setattr__, never by a
    # caller.
    _by_name: Mapping[str, PlannedService] | None = recordclass.field(
        init=False, default=None, repr=False, eq=False
    )
    _dependents: Mapping[str, tuple[str, ...]] | None = recordclass.field(
        init=False, default=None, repr=False, eq=False
    )

    def _index(self) -> Mapping[str, PlannedService]:
        by_name = self._by_name
        if by_name is None:
            by_name = types.MappingProxyType({planned.name: planned for planned in self.services})
            object.__setattr__(self, "_by_name", by_name)
        return by_name

    def __getitem__(self, name: str) -> PlannedService:
        """The planned service called ``name``; KeyError when it is not in the plan."""
        try:
            return self._index()[name]
        except KeyError:
            raise KeyError(f"service {name!r} is not in the plan for role {self.role!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._index()

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
        dependents = self._dependents
        if dependents is None:
            found: dict[str, list[str]] = {planned.name: [] for planned in self.services}
            for planned in self.services:  # start order, so each list comes out in start order
                for predecessor in planned.after:
                    found[predecessor].append(planned.name)
            dependents = types.MappingProxyType({n: tuple(d) for n, d in found.items()})
            object.__setattr__(self, "_dependents", dependents)
        return dependents[name]

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
            recordclass.evolve(by_name[name], wave=number, after=tuple(sorted(predecessors[name])))
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
        "supervision": recordclass.asdict(service.supervision),
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
    # Services are numbered in name order, and the graph is lists indexed by number. Each
    # declared name is looked up in a dict once; after that, every step walks the services in
    # number order and reads compact lists, instead of hashing names into dicts and sets or
    # appending to lists in scattered order: at 100,000 services those miss the CPU caches at
    # every step, and plan time grew faster than the graph (13-17x per tenfold step). Numbers in
    # name order also make "sorted by name" a sort of integers, or no sort at all.
    graph = _Graph(services, role, plugins)
    member, pulled_in_by = graph.closure(role)
    edges = graph.resolve(member)
    levels = _levels(edges.predecessors, member)
    names = graph.names
    if levels is None:
        predecessors = {
            names[i]: {names[p] for p in edges.predecessors[i]}
            for i, flag in enumerate(member)
            if flag
        }
        raise PlanError(graph.describe_cycle(_find_cycle(predecessors), role))

    # Build each planned service in number order (its record and parts are read in sequence),
    # then deal them, still by name, into their waves: start order.
    records = graph.records
    in_seed = graph.in_seed
    resolved_of, unresolved_of, provided_by_of = edges.resolved, edges.unresolved, edges.provided_by
    predecessors_of = edges.predecessors
    name_of = names.__getitem__
    by_wave: list[list[int]] = [[] for _ in range(max(itertools.compress(levels, member)) + 1)]
    planned_by_wave: list[list[PlannedService]] = [[] for _ in by_wave]
    for i in itertools.compress(itertools.count(), member):
        resolved = resolved_of[i]
        before = predecessors_of[i]
        if len(before) > 1:
            before = sorted(set(before))  # a pair declared twice (need x, after x) counts once
        by = pulled_in_by[i]
        wave = levels[i]
        by_wave[wave].append(i)
        planned_by_wave[wave].append(
            PlannedService(
                service=records[i],
                wave=wave,
                in_role=bool(in_seed[i]),
                pulled_in_by=None if by < 0 else names[by],
                needs=resolved.get("need", ()),
                wants=resolved.get("want", ()),
                uses=resolved.get("use", ()),
                after=tuple(map(name_of, before)),
                provided_by=provided_by_of[i],
                resolved=resolved,
                unresolved=unresolved_of[i],
            )
        )
    planned = list(itertools.chain.from_iterable(planned_by_wave))
    waves = [tuple(map(name_of, wave)) for wave in by_wave]
    # Only a service that declares a name nobody has gets a warning: look at those alone.
    suspects = edges.suspects
    warnings = (
        unknown_names((records[i] for wave in by_wave for i in wave if i in suspects), records)
        if suspects
        else []
    )
    return Plan(role=role, services=planned, waves=waves, warnings=tuple(warnings))


_Names: TypeAlias = Mapping[str, tuple[str, ...]]


class _Edges:
    """The planned services' edges and resolved declarations, each service by its number (a
    plain class: attrs would compile methods nothing calls, on every import)."""

    __slots__ = ("predecessors", "provided_by", "resolved", "suspects", "unresolved")

    def __init__(
        self,
        *,
        predecessors: list[list[int]],
        resolved: list[_Names],
        unresolved: list[_Names],
        provided_by: list[_Names],
        suspects: set[int],
    ) -> None:
        self.predecessors = predecessors
        """Per service, the services it starts after (a pair declared twice is listed twice)."""
        self.resolved = resolved
        """Per service, ``PlannedService.resolved``."""
        self.unresolved = unresolved
        """Per service, ``PlannedService.unresolved``."""
        self.provided_by = provided_by
        """Per service, ``PlannedService.provided_by``."""
        self.suspects = suspects
        """Planned services that declare an after/before/use/want name no service has or
        provides."""


# One C call reads a record's five declarations, in the order of KINDS.
_declared: Final = operator.attrgetter(*KINDS)
_provide_of: Final = operator.attrgetter("provide")
_roles_of: Final = operator.attrgetter("roles")


class _Graph:
    """Every known service and virtual name, and the rules that resolve a declared name.

    Services are numbered in name order. A declared name resolves to its service's number, a
    virtual name to ``~k`` for the k-th virtual name, and a name nobody has to the last of those
    (a virtual name without providers).
    """

    def __init__(self, services: Iterable[Service], role: str, plugins: Sequence[str]) -> None:
        self.plugins = tuple(plugins)
        given = list(services)
        records = sorted(given, key=_name_of)
        ids: dict[str, int] = dict(zip(map(_name_of, records), itertools.count()))
        if len(ids) < len(records):  # a name given twice: refused, unless it is the same record
            records = sorted(_unique(given), key=_name_of)
            ids = dict(zip(map(_name_of, records), itertools.count()))
        self.records: list[Service] = records
        self.names: list[str] = list(ids)
        # The loops below run in C over every record and stop in Python only where there is
        # something to do: few services provide a virtual name, and every role test is a flag.
        self.in_seed = bytearray(
            map(operator.contains, map(_roles_of, records), itertools.repeat(role))
        )
        """1 for each service whose ``roles`` contain the plan's role."""
        providers: dict[str, list[int]] = {}
        for number in itertools.compress(itertools.count(), map(_provide_of, records)):
            for virtual in records[number].provide:
                # A real service of the same name wins: the virtual spelling is never consulted.
                if virtual not in ids:
                    providers.setdefault(virtual, []).append(number)
        name_of = self.names.__getitem__
        self.providers: dict[str, tuple[str, ...]] = {}
        self.provider_ids: list[tuple[int, ...]] = []
        for virtual, numbers in providers.items():
            ordered = sorted(set(numbers))
            ids[virtual] = ~len(self.provider_ids)
            self.provider_ids.append(tuple(ordered))
            self.providers[virtual] = tuple(map(name_of, ordered))
        self.unknown = ~len(self.provider_ids)
        self.provider_ids.append(())
        self.ids = ids
        # Every declaration, resolved once: per service, one tuple of numbers per word of KINDS.
        unknown = itertools.repeat(self.unknown)
        get = ids.get
        self.refs: list[tuple[tuple[int, ...], ...]] = []
        for svc in records:
            need, want, use, after, before = svc.need, svc.want, svc.use, svc.after, svc.before
            self.refs.append(
                (
                    tuple(map(get, need, unknown)) if need else (),
                    tuple(map(get, want, unknown)) if want else (),
                    tuple(map(get, use, unknown)) if use else (),
                    tuple(map(get, after, unknown)) if after else (),
                    tuple(map(get, before, unknown)) if before else (),
                )
            )

    def record(self, name: str) -> Service:
        """The service called ``name``."""
        return self.records[self.ids[name]]

    def is_service(self, name: str) -> bool:
        """True when a service is called ``name`` (not a virtual name, not an unknown one)."""
        return self.ids.get(name, -1) >= 0

    # ----------------------------------------------------------------- the role and its closure

    def closure(self, role: str) -> tuple[bytearray, list[int]]:
        """The role's services plus everything they need or want, transitively (a flag per
        service); and who pulled each one in (-1 for the role's and unplanned services).
        PlanError for a role no service declares, or a need that nothing satisfies."""
        seed = list(itertools.compress(itertools.count(), self.in_seed))
        if not seed:
            known = sorted({r for svc in self.records for r in svc.roles})
            raise PlanError(
                f"unknown role {role!r}; known roles: {', '.join(known) or '(none)'}. "
                f"No service of the installed plugins ({self._plugin_list()}) declares role "
                f"{role!r}: pass one of the known roles, or install the plugin that defines it."
            )
        member = bytearray(self.in_seed)
        pulled_in_by = [-1] * len(member)
        # Which providers a virtual pulls in depends on the seed only, never on visiting order,
        # so the plan is the same whatever order the plugins returned their services in.
        pulls: dict[int, tuple[int, ...]] = {}
        lacking = False
        refs = self.refs
        queue = deque(seed)
        while queue:
            number = queue.popleft()
            declared = refs[number]
            for targets, strict in ((declared[0], True), (declared[1], False)):
                for target in targets:
                    if target >= 0:
                        if not member[target]:
                            member[target] = 1
                            pulled_in_by[target] = number
                            queue.append(target)
                        continue
                    found = pulls.get(target)
                    if found is None:
                        found = pulls[target] = self._pull_targets(target)
                    if not found:
                        lacking = lacking or strict
                        continue
                    for other in found:
                        if not member[other]:
                            member[other] = 1
                            pulled_in_by[other] = number
                            queue.append(other)
        if lacking:
            raise PlanError(self._missing_message(member, pulled_in_by, role))
        return member, pulled_in_by

    def _pull_targets(self, target: int) -> tuple[int, ...]:
        providers = self.provider_ids[~target]
        in_role = tuple(p for p in providers if self.in_seed[p])
        # Providers in the role are enough (and all of them run anyway); with none in the role,
        # every known provider is pulled in: strict, like rc_depend_strict, and never a guess.
        return in_role or providers

    def _missing_message(self, member: bytearray, pulled: list[int], role: str) -> str:
        names = self.names
        missing = sorted(
            (names[number], target)
            for number, service in enumerate(self.records)
            if member[number]
            for target, ref in zip(service.need, self.refs[number][0], strict=True)
            if ref < 0 and not self._pull_targets(ref)
        )
        pulled_in_by = {names[number]: names[by] for number, by in enumerate(pulled) if by >= 0}
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

    def resolve(self, member: bytearray) -> _Edges:
        """The planned services' edges and resolved declarations."""
        names = self.names
        count = len(names)
        predecessors: list[list[int]] = [[] for _ in range(count)]
        resolved_of: list[_Names] = [_NO_NAMES] * count
        unresolved_of: list[_Names] = [_NO_NAMES] * count
        provided_by_of: list[_Names] = [_NO_NAMES] * count
        suspects: set[int] = set()
        unknown = self.unknown
        # A virtual name resolves the same way for every service that declares it: resolve it once.
        in_plan: dict[int, tuple[int, ...]] = {}
        refs = self.refs
        records = self.records
        name_of = names.__getitem__
        # Virtual and unknown names are negative numbers, which index the zero tail: one test
        # tells "a planned service, by its own name" from everything else.
        is_planned = (member + bytes(len(self.provider_ids))).__getitem__
        for number in itertools.compress(itertools.count(), member):  # in sequence
            service = records[number]
            resolved: dict[str, tuple[str, ...]] = {}
            unresolved: dict[str, tuple[str, ...]] | None = None
            provided_by: dict[str, tuple[str, ...]] | None = None
            own_predecessors = predecessors[number]
            for kind, targets, declared in zip(
                KINDS, refs[number], _declared(service), strict=True
            ):
                if not targets:
                    continue
                found: Sequence[int]
                if all(map(is_planned, targets)):
                    # The common case: planned services, by their own names. The declared tuple
                    # is the resolved one unless it names a service twice.
                    found = targets
                    if len(targets) == 1 or len(set(targets)) == len(targets):
                        resolved[kind] = declared
                    else:
                        resolved[kind] = tuple(map(name_of, dict.fromkeys(targets)))
                else:
                    if unresolved is None or provided_by is None:  # made when first needed
                        unresolved, provided_by = {}, {}
                    found, missing = self._resolve_names(
                        declared, targets, member, in_plan, provided_by
                    )
                    if missing:
                        unresolved[kind] = missing
                    if kind != "need" and unknown in targets:
                        suspects.add(number)
                    if found:
                        resolved[kind] = tuple(map(name_of, dict.fromkeys(found)))
                if kind == "before":
                    for other in found:  # rare enough that the scattered appends are cheap
                        predecessors[other].append(number)
                else:
                    own_predecessors.extend(found)
            # Values are tuples already: wrap the dicts rather than copy them.
            if resolved:
                resolved_of[number] = types.MappingProxyType(resolved)
            if unresolved:
                unresolved_of[number] = types.MappingProxyType(unresolved)
            if provided_by:
                provided_by_of[number] = types.MappingProxyType(provided_by)
        return _Edges(
            predecessors=predecessors,
            resolved=resolved_of,
            unresolved=unresolved_of,
            provided_by=provided_by_of,
            suspects=suspects,
        )

    def _resolve_names(
        self,
        declared: tuple[str, ...],
        targets: tuple[int, ...],
        member: bytearray,
        in_plan: dict[int, tuple[int, ...]],
        provided_by: dict[str, tuple[str, ...]],
    ) -> tuple[list[int], tuple[str, ...]]:
        """The planned services ``declared`` resolves to, and the names that match none.

        Adds each virtual name that has planned providers to ``provided_by``; ``in_plan`` caches
        which providers of a virtual name are planned.
        """
        found_all: list[int] = []
        missing: list[str] = []
        for name, target in zip(declared, targets, strict=True):
            if target >= 0:
                if member[target]:
                    found_all.append(target)
                else:
                    missing.append(name)
                continue
            found = in_plan.get(target)
            if found is None:
                found = in_plan[target] = tuple(p for p in self.provider_ids[~target] if member[p])
            if found:
                provided_by[name] = tuple(map(self.names.__getitem__, found))
                found_all.extend(found)
            else:
                missing.append(name)
        return found_all, tuple(missing)

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
        svc = self.record(waiter)
        for kind in _AFTER_KINDS:
            for target in getattr(svc, kind):
                if target == waited:
                    reasons.append((kind, target, None))
                elif not self.is_service(target) and waited in self.providers.get(target, ()):
                    reasons.append((kind, target, target))
        for target in self.record(waited).before:
            if target == waiter:
                reasons.append(("before", target, None))
            elif not self.is_service(target) and waiter in self.providers.get(target, ()):
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


_name_of: Final = operator.attrgetter("name")


def _unique(services: Sequence[Service]) -> list[Service]:
    """``services`` without repeats of the same record; PlanError for the first service, in the
    plugins' order, whose name another service took before it."""
    seen: dict[str, Service] = {}
    for service in services:
        first = seen.setdefault(service.name, service)
        if first is not service:
            raise PlanError(_duplicate_message(service.name, first.origin, service.origin))
    return list(seen.values())


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


def _levels(predecessors: Sequence[list[int]], member: bytearray) -> list[int] | None:
    """Each planned service's wave (0: it starts after nothing; else one more than its latest
    predecessor's), by number; None when planned services form a cycle.

    A depth-first walk over predecessors: it reads each service's own list, where Kahn's
    algorithm needs every service's successors, gathered by appends in scattered order.
    """
    count = len(predecessors)
    # Marks above any wave (a wave is below the service count), so that one max() over a
    # service's predecessors both says whether all are placed and gives its wave.
    unplaced, on_path = count, count + 1
    levels = [unplaced] * count
    level_of = levels.__getitem__
    for root in itertools.compress(itertools.count(), member):
        if levels[root] != unplaced:
            continue
        before = predecessors[root]
        if not before:
            levels[root] = 0
            continue
        latest = max(map(level_of, before))
        if latest < unplaced:  # all placed already: no walk needed
            levels[root] = latest + 1
            continue
        levels[root] = on_path
        path = [root]
        pending = [iter(before)]
        while path:
            for predecessor in pending[-1]:
                level = levels[predecessor]
                if level == unplaced:
                    levels[predecessor] = on_path
                    path.append(predecessor)
                    pending.append(iter(predecessors[predecessor]))
                    break
                if level == on_path:
                    return None  # back on the current path: a cycle
            else:
                done = path.pop()
                pending.pop()
                before = predecessors[done]
                levels[done] = max(map(level_of, before)) + 1 if before else 0
    return levels


def _find_cycle(predecessors: Mapping[str, set[str]]) -> list[str]:
    """A shortest cycle through a node that Kahn's algorithm could not place, as ``[a, ..., a]``.

    Every unplaced service has an unplaced predecessor, so walking predecessors from any of them
    must revisit a node: that node lies on a cycle. A breadth-first search from it then finds the
    shortest way back, which makes the message as short as the problem allows.
    """
    placed = {name for wave in _waves(predecessors) for name in wave}
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
