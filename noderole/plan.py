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
up once, into one flat array of numbers; every later step reads compact arrays indexed by number,
in number order, so a graph of 100,000 services does not turn each step into a CPU cache miss.
docs/concepts/dependencies.md explains the rules next to OpenRC's and systemd's.
"""

from __future__ import annotations

import gc
import itertools
import operator
import posixpath
import types
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias, cast

from noderole import recordclass
from noderole.errors import PlanError
from noderole.names import RESERVED_NAMES
from noderole.records import RecordBase, Service, did_you_mean, unknown_names

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
    if isinstance(value, types.MappingProxyType | _Declared):
        return value  # built by build_plan itself, already of tuples
    return types.MappingProxyType({key: tuple(names) for key, names in value.items()})


class _Declared(Mapping[str, tuple[str, ...]]):
    """``resolved`` of a planned service whose declared names are all planned services, each
    named once (the common case): its own non-empty declarations, read from its record when
    asked, in KINDS order. A dict and a proxy of its own cost each planned service 184 bytes
    more than this view; at 100,000 services that was 3,000 more pages of fresh memory, each
    a page fault (2.3 us on the machine measured), and 5% of the plan's time at every size."""

    __slots__ = ("_service",)

    def __init__(self, service: Service) -> None:
        self._service = service

    def __getitem__(self, key: str) -> tuple[str, ...]:
        names: tuple[str, ...] = getattr(self._service, key, ()) if key in KINDS else ()
        if not names:
            raise KeyError(key)
        return names

    def __iter__(self) -> Iterator[str]:
        service = self._service
        return (kind for kind in KINDS if getattr(service, kind))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"mappingproxy({dict(self)!r})"


_new_declared: Final = object.__new__
_set_declared_service: Final = _Declared._service.__set__  # type: ignore[attr-defined,misc]


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

    def needed_by(self, names: Iterable[str]) -> dict[str, str]:
        """The services of the plan that ``need`` one of ``names`` (services of the plan),
        directly or through another that does, each with the service it needs by which it is
        reached, in stop order: what stops with them, as OpenRC's ``rc-service NAME stop``
        stops what needs NAME and systemd what ``Requires=`` it. ``need`` only: ``want``,
        ``use``, ``after`` and ``before`` order starts, and a stop leaves them be. A service
        that needs a virtual name needs every planned provider of it (:attr:`PlannedService.needs`),
        so it stops with any of them. Raises KeyError for a name that is not in this plan."""
        stopping = set(names)
        for name in stopping:
            self[name]  # a clear KeyError for a name outside the plan
        found: dict[str, str] = {}
        for planned in self.services:  # start order: what a service needs comes before it
            if planned.name in stopping:
                continue
            via = next((d for d in planned.needs if d in stopping or d in found), None)
            if via is not None:
                found[planned.name] = via
        return {name: found[name] for name in reversed(self.names()) if name in found}

    def stop_order(self) -> tuple[str, ...]:
        """Service names in stop order: start order reversed, so dependents stop first."""
        return tuple(reversed(self.names()))

    def stop_waves(self, names: Iterable[str]) -> list[list[str]]:
        """``names`` (services of the plan) in groups, in stop order: the waves reversed, so
        that a group's services depend on none of each other and may stop together."""
        wanted = set(names)
        waves = ([n for n in reversed(wave) if n in wanted] for wave in reversed(self.waves))
        return [wave for wave in waves if wave]

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


# The fields of PlannedService, and a setter of each slot: the planner builds its records field by
# field (tests check this list against the class, and each record against one built by __init__).
_PLANNED_FIELDS: Final = (
    "service",
    "wave",
    "in_role",
    "pulled_in_by",
    "needs",
    "wants",
    "uses",
    "after",
    "provided_by",
    "resolved",
    "unresolved",
)
_PLANNED_SETTERS: Final = tuple(vars(PlannedService)[name].__set__ for name in _PLANNED_FIELDS)


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
    # Services are numbered in name order, every declared name is looked up once into one flat
    # array of numbers, and each later step reads compact arrays in number order: at 100,000
    # services, per-service lists, tuples and dicts scattered over the heap miss the CPU caches
    # at every step, and plan time grew faster than the graph (13-17x per tenfold step). Numbers
    # in name order also make "sorted by name" a sort of integers, or no sort at all.
    graph = _Graph(services, role, plugins)
    member, pulled_in_by = graph.closure(role)
    providing = graph.planned_providers(member)
    befores = graph.before_edges(member, providing)
    levels = graph.levels(member, providing, befores)
    if levels is None:
        cycle = _find_cycle(graph.predecessor_names(member, providing, befores))
        raise PlanError(graph.describe_cycle(cycle, role))
    plan = graph.plan(role, member, pulled_in_by, providing, befores, levels)
    _check_pidfiles(plan)
    _check_written(plan)
    return plan


def _check_written(plan: Plan) -> None:
    """PlanError for a file two planned services' WriteFile steps write with different contents
    (or modes): which one it holds, and which one each service read at its start, would hang on
    the order their steps ran in."""
    from noderole.records import WriteFile

    writers: dict[str, tuple[str, WriteFile]] = {}
    for entry in plan.services:
        for step in entry.service.pre_start:
            if isinstance(step, WriteFile):
                name, first = writers.setdefault(posixpath.normpath(step.path), (entry.name, step))
                if name != entry.name and (first.content, first.mode) != (step.content, step.mode):
                    raise PlanError(
                        f"services {name!r} and {entry.name!r} both write {step.path}, with "
                        "different contents: what it holds, and what each reads, would hang on "
                        "the order they ran in; let one service write it"
                    )


def _check_pidfiles(plan: Plan) -> None:
    """PlanError for a pidfile two planned services share, or one that is also a log: the
    supervisor replaced the other's pidfile ("names a running process that is not ours"), and
    two OpenRC runscripts of one pidfile signal each other's process."""
    owner: dict[str, str] = {}
    for entry in plan.services:
        pidfile = entry.service.pidfile
        if pidfile is not None:
            other = owner.setdefault(posixpath.normpath(pidfile), entry.name)
            if other != entry.name:
                raise PlanError(
                    f"services {other!r} and {entry.name!r} both have pidfile {pidfile}: each "
                    "service needs one of its own; change one of them"
                )
    if not owner:
        return
    for entry in plan.services:
        for log in (entry.service.output_log, entry.service.error_log):
            if log is not None and posixpath.normpath(log) in owner:
                raise PlanError(
                    f"{log} is service {owner[posixpath.normpath(log)]!r}'s pidfile and service "
                    f"{entry.name!r}'s "
                    "log: the pid would be written into the log, or the log into the pidfile; "
                    "change one of them"
                )


_Names: TypeAlias = Mapping[str, tuple[str, ...]]
_Befores: TypeAlias = tuple["array[int]", "array[int]"]
"""Per planned service, the planned services whose ``before`` names it (or a virtual name it
provides): where each service's part starts (one more entry than services), and the parts."""


# One C call reads a record's five declarations, in the order of KINDS.
_declared: Final = operator.attrgetter(*KINDS)
_provide_of: Final = operator.attrgetter("provide")
_roles_of: Final = operator.attrgetter("roles")
_WORDS: Final = len(KINDS)
_BEFORE: Final = KINDS.index("before")  # the last word: the others, together, come first


class _Sized:
    """An iterable of a known length: ``list()`` reads it (PEP 424's ``__length_hint__``) and
    allocates the list once, where a ``map`` or a ``chain`` tells it nothing and it grows."""

    __slots__ = ("_iterable", "_length")

    def __init__(self, iterable: Iterable[Any], length: int) -> None:
        self._iterable = iterable
        self._length = length

    def __iter__(self) -> Iterator[Any]:
        return iter(self._iterable)

    def __length_hint__(self) -> int:
        return self._length


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
        for reserved in RESERVED_NAMES:  # two lookups: most nodes have one of them (renew)
            if reserved in ids:
                _check_reserved(records[ids[reserved]])
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
        for reserved in RESERVED_NAMES:  # an alias is a unit or runscript of that name too
            for number in providers.get(reserved, ()):
                _check_reserved(records[number], alias=True)
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
        # Every declaration resolved once, all in C: one flat array of numbers (no tuple per
        # service and word), and where each service's words start in it. Each pass is a plain
        # loop over a list, and each array is built from a list: an array grown from an iterator
        # reallocates by a sixteenth at a time, and one loop that walks the declarations, looks
        # every name up and converts the number waits on a chain of cache misses per name. Apart,
        # the passes cost half as much at 100,000 services (where the names, the dict and the
        # numbers no longer fit in the CPU's cache) and a third less at 10,000.
        declared = list(itertools.chain.from_iterable(map(_declared, records)))
        self.bounds = array("i", list(itertools.accumulate(map(len, declared), initial=0)))
        """Word k of service n is ``targets[bounds[5n + k]:bounds[5n + k + 1]]``."""
        # The two lists of every declared name (500,000 at 100,000 services) are allocated once,
        # at their known length: grown by an eighth at a time, each step copied the whole list
        # once it had outgrown the CPU's caches (flattening and looking up, in one interleaved
        # run: 185 ms -> 160 ms at 100,000 services, 11.4 ms -> 9.6 ms at 10,000).
        declared_names = list(_Sized(itertools.chain.from_iterable(declared), self.bounds[-1]))
        found = list(_Sized(map(ids.get, declared_names), len(declared_names)))
        if None in found:  # a name nobody has: rare, and worth a warning of its own
            found = [self.unknown if number is None else number for number in found]
        self.targets = array("i", cast("list[int]", found))
        """Every declared name's number, service by service, word by word in KINDS order."""

    def record(self, name: str) -> Service:
        """The service called ``name``."""
        return self.records[self.ids[name]]

    def is_service(self, name: str) -> bool:
        """True when a service is called ``name`` (not a virtual name, not an unknown one)."""
        return self.ids.get(name, -1) >= 0

    def word(self, number: int, kind: int) -> array[int]:
        """The numbers that word ``kind`` (an index into KINDS) of service ``number`` names."""
        start = number * _WORDS + kind
        return self.targets[self.bounds[start] : self.bounds[start + 1]]

    # ----------------------------------------------------------------- the role and its closure

    def closure(self, role: str) -> tuple[bytearray, list[int]]:
        """The role's services plus everything they need or want, transitively (a flag per
        service); and who pulled each one in (-1 for the role's and unplanned services).
        PlanError for a role no service declares, or a need that nothing satisfies."""
        seed = list(itertools.compress(itertools.count(), self.in_seed))
        if not seed:
            known = sorted({r for svc in self.records for r in svc.roles})
            raise PlanError(
                f"unknown role {role!r}{did_you_mean(role, known)}; known roles: "
                f"{', '.join(known) or '(none)'}. "
                f"No service of the installed plugins ({self._plugin_list()}) declares role "
                f"{role!r}: pass one of the known roles, or install the plugin that defines it."
            )
        member = bytearray(self.in_seed)
        pulled_in_by = [-1] * len(member)
        # Which providers a virtual pulls in depends on the seed only, never on visiting order,
        # so the plan is the same whatever order the plugins returned their services in.
        pulls: dict[int, tuple[int, ...]] = {}
        lacking = False
        bounds, targets = self.bounds, self.targets
        queue = seed  # breadth first: the loop reads what it appends
        for number in queue:
            start = number * _WORDS  # need, then want: one run of the flat array
            for target in targets[bounds[start] : bounds[start + 2]]:
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
                    lacking = lacking or target in self.word(number, 0)  # a need, not a want
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
            for target, ref in zip(service.need, self.word(number, 0), strict=True)
            if ref < 0 and not self._pull_targets(ref)
        )
        pulled_in_by = {names[number]: names[by] for number, by in enumerate(pulled) if by >= 0}
        name, target = missing[0]
        why = (
            f"{name} is in role {role!r}"
            if name not in pulled_in_by
            else f"{name} is in the plan because {' ← '.join(_chain(name, pulled_in_by))}"
        )
        close = did_you_mean(target, [*self.names, *self.providers])
        message = (
            f"{name} needs {target}, which no installed plugin provides "
            f"(installed plugins: {self._plugin_list()}). No service is called {target!r}{close} "
            f"and none provides it; {why}. Install or enable a plugin that defines {target!r}, or "
            f"remove {target!r} from the need of {name} (use 'want' if it is optional)."
        )
        others = [f"{n} needs {t}" for n, t in missing[1:]]
        if others:
            message += f" Also unsatisfied: {'; '.join(others)}."
        return message

    def _plugin_list(self) -> str:
        return ", ".join(self.plugins) if self.plugins else "none"

    # ----------------------------------------------------------------- edges and waves

    def planned_providers(self, member: bytearray) -> list[tuple[int, ...]]:
        """Per virtual name (``~number``), its planned providers: what a reference to it means."""
        return [
            tuple(itertools.compress(numbers, map(member.__getitem__, numbers)))
            for numbers in self.provider_ids
        ]

    def before_edges(self, member: bytearray, providing: list[tuple[int, ...]]) -> _Befores:
        """Per planned service, the planned services whose ``before`` names it (or a virtual
        name it provides), as one flat array: the only edges a service does not declare itself.
        """
        bounds = self.bounds
        # Only the services that declare a ``before`` at all are visited; they are found in C.
        declaring = itertools.compress(
            itertools.count(),
            map(
                operator.and_,
                member,
                map(operator.ne, bounds[_BEFORE::_WORDS], bounds[_WORDS::_WORDS]),
            ),
        )
        waited: list[int] = []
        waiting: list[int] = []
        for number in declaring:
            for target in self.word(number, _BEFORE):
                if target >= 0:
                    if member[target]:
                        waited.append(target)
                        waiting.append(number)
                    continue
                found = providing[~target]
                waited.extend(found)
                waiting.extend(itertools.repeat(number, len(found)))
        # A counting sort by the waiting-for service: each one's part is contiguous.
        starts = array("i", [0]) * (len(member) + 1)
        for target in waited:
            starts[target + 1] += 1
        starts = array("i", list(itertools.accumulate(starts)))  # from a list: see __init__
        sources = array("i", [0]) * len(waited)
        free = array("i", starts)
        for target, source in zip(waited, waiting, strict=True):
            sources[free[target]] = source
            free[target] += 1
        return starts, sources

    def levels(
        self, member: bytearray, providing: list[tuple[int, ...]], befores: _Befores
    ) -> list[int] | None:
        """Each planned service's wave (0: it starts after nothing; else one more than its
        latest predecessor's), by number; None when planned services form a cycle.

        A depth-first walk over each service's own declarations, read straight from the flat
        array: a name of an unplanned service counts as wave -1, and a virtual name is a node
        whose wave is its latest planned provider's (-1 without one), at index ``~k`` (Python's
        index from the end of the list). Kahn's algorithm would need every service's successors
        first, gathered by appends in scattered order.
        """
        count = len(member)
        bounds, targets = self.bounds, self.targets
        starts, sources = befores
        # Marks above any wave (a wave is below the service count), so that one max() over a
        # node's predecessors both says whether all are placed and gives its wave.
        unplaced, on_path = count, count + 1
        levels = list(map((-1, unplaced).__getitem__, member))
        levels.extend(unplaced if found else -1 for found in reversed(providing))
        level_of = levels.__getitem__

        def predecessors(node: int) -> Sequence[int]:
            if node < 0:
                return providing[~node]
            start = node * _WORDS
            own = targets[bounds[start] : bounds[start + _BEFORE]]
            first, last = starts[node], starts[node + 1]
            return own + sources[first:last] if first != last else own

        # Each service's own part of the flat array and of the before-edges, read in sequence.
        parts = zip(bounds[::_WORDS], bounds[_BEFORE::_WORDS], starts, starts[1:], strict=False)
        for root, (low, high, first, last) in itertools.compress(enumerate(parts), member):
            if levels[root] != unplaced:
                continue
            # (max() without default=: a keyword argument costs more than the maximum of a few)
            latest = max(map(level_of, targets[low:high])) if low != high else -1
            if first != last:
                latest = max(latest, *map(level_of, sources[first:last]))
            if latest < unplaced:  # all placed already: no walk needed
                levels[root] = latest + 1
                continue
            levels[root] = on_path
            path = [root]
            pending = [iter(predecessors(root))]
            while path:
                for predecessor in pending[-1]:
                    level = levels[predecessor]
                    if level == unplaced:
                        levels[predecessor] = on_path
                        path.append(predecessor)
                        pending.append(iter(predecessors(predecessor)))
                        break
                    if level == on_path:
                        return None  # back on the current path: a cycle
                else:
                    done = path.pop()
                    pending.pop()
                    before = predecessors(done)
                    latest = max(map(level_of, before)) if before else -1
                    levels[done] = latest + 1 if done >= 0 else latest
        return levels

    def predecessor_names(
        self, member: bytearray, providing: list[tuple[int, ...]], befores: _Befores
    ) -> dict[str, set[str]]:
        """Each planned service's predecessors by name (to name a cycle: no hurry there)."""
        names = self.names
        starts, sources = befores
        found: dict[str, set[str]] = {}
        for number in itertools.compress(itertools.count(), member):
            before = set(sources[starts[number] : starts[number + 1]])
            for kind in range(_BEFORE):
                for target in self.word(number, kind):
                    if target < 0:
                        before.update(providing[~target])
                    elif member[target]:
                        before.add(target)
            found[names[number]] = {names[other] for other in before}
        return found

    # ----------------------------------------------------------------- the plan

    def plan(
        self,
        role: str,
        member: bytearray,
        pulled_in_by: list[int],
        providing: list[tuple[int, ...]],
        befores: _Befores,
        levels: list[int],
    ) -> Plan:
        """The plan: each planned service built in number order (its record and its part of the
        flat arrays are read in sequence), then dealt, still by name, into its wave."""
        records, names, in_seed = self.records, self.names, self.in_seed
        bounds, targets = self.bounds, self.targets
        starts, sources = befores
        name_of = names.__getitem__
        # Virtual and unknown names are negative numbers, which index the zero tail: one test
        # tells "a planned service, by its own name" from everything else.
        is_planned = (member + bytes(len(self.provider_ids))).__getitem__
        by_wave: list[list[int]] = [[] for _ in range(max(itertools.compress(levels, member)) + 1)]
        planned_by_wave: list[list[PlannedService]] = [[] for _ in by_wave]
        suspects: set[int] = set()
        new = object.__new__
        (
            set_service,
            set_wave,
            set_in_role,
            set_pulled_in_by,
            set_needs,
            set_wants,
            set_uses,
            set_after,
            set_provided_by,
            set_resolved,
            set_unresolved,
        ) = _PLANNED_SETTERS
        for number in itertools.compress(itertools.count(), member):
            service = records[number]
            declared = _declared(service)
            first, _, _, _, own_end, end = bounds[number * _WORDS : (number + 1) * _WORDS + 1]
            every = targets[first:end]
            resolved: _Names
            provided_by: _Names = _NO_NAMES
            unresolved: _Names = _NO_NAMES
            before: Sequence[int]
            if all(map(is_planned, every)) and len(set(every)) == len(every):
                # The common case: planned services, by their own names, each named once. The
                # declared tuples are the resolved ones, read from the record when asked.
                if first != end:
                    resolved = _new_declared(_Declared)
                    _set_declared_service(resolved, service)
                else:
                    resolved = _NO_NAMES
                needs, wants, uses = declared[0], declared[1], declared[2]
                before = every[: own_end - first]
            else:
                resolved, unresolved, provided_by, before = self._resolve(
                    number, declared, is_planned, providing, suspects
                )
                needs = resolved.get("need", ())
                wants = resolved.get("want", ())
                uses = resolved.get("use", ())
            waited_by = starts[number], starts[number + 1]
            if waited_by[0] != waited_by[1]:
                before = [*before, *sources[waited_by[0] : waited_by[1]]]
            if len(before) > 1:
                before = sorted(set(before))  # a pair declared twice (need x, after x) counts once
            by = pulled_in_by[number]
            wave = levels[number]
            by_wave[wave].append(number)
            # Built field by field through the slots: the generic keyword __init__ (converters
            # that have nothing to convert here) cost more than all the planning before it.
            planned = new(PlannedService)
            set_service(planned, service)
            set_wave(planned, wave)
            set_in_role(planned, bool(in_seed[number]))
            set_pulled_in_by(planned, None if by < 0 else names[by])
            set_needs(planned, needs)
            set_wants(planned, wants)
            set_uses(planned, uses)
            set_after(planned, tuple(map(name_of, before)))
            set_provided_by(planned, provided_by)
            set_resolved(planned, resolved)
            set_unresolved(planned, unresolved)
            planned_by_wave[wave].append(planned)
        services = list(itertools.chain.from_iterable(planned_by_wave))
        waves = [tuple(map(name_of, wave)) for wave in by_wave]
        # Only a service that declares a name nobody has gets a warning: look at those alone.
        warnings = (
            unknown_names((records[i] for wave in by_wave for i in wave if i in suspects), records)
            if suspects
            else []
        )
        return Plan(role=role, services=services, waves=waves, warnings=tuple(warnings))

    def _resolve(
        self,
        number: int,
        declared: tuple[tuple[str, ...], ...],
        is_planned: Callable[[int], int],
        providing: list[tuple[int, ...]],
        suspects: set[int],
    ) -> tuple[_Names, _Names, _Names, list[int]]:
        """``resolved``, ``unresolved`` and ``provided_by`` of a planned service that names a
        virtual name, an unplanned service or a service twice; and the services it starts after
        by its own declarations. Adds it to ``suspects`` when it names a name nobody has in a
        word other than ``need``."""
        name_of = self.names.__getitem__
        resolved: dict[str, tuple[str, ...]] = {}
        unresolved: dict[str, tuple[str, ...]] = {}
        provided_by: dict[str, tuple[str, ...]] = {}
        before: list[int] = []
        for index, (kind, names) in enumerate(zip(KINDS, declared, strict=True)):
            if not names:
                continue
            targets = self.word(number, index)
            found: Sequence[int]
            if all(map(is_planned, targets)):
                found = targets
                unique = len(targets) == 1 or len(set(targets)) == len(targets)
                resolved[kind] = names if unique else tuple(map(name_of, dict.fromkeys(targets)))
            else:
                found, missing = self._resolve_names(
                    names, targets, is_planned, providing, provided_by
                )
                if missing:
                    unresolved[kind] = missing
                if kind != "need" and self.unknown in targets:
                    suspects.add(number)
                if found:
                    resolved[kind] = tuple(map(name_of, dict.fromkeys(found)))
            if index != _BEFORE:
                before.extend(found)
        return (
            # Values are tuples already: wrap the dicts rather than copy them.
            types.MappingProxyType(resolved) if resolved else _NO_NAMES,
            types.MappingProxyType(unresolved) if unresolved else _NO_NAMES,
            types.MappingProxyType(provided_by) if provided_by else _NO_NAMES,
            before,
        )

    def _resolve_names(
        self,
        declared: tuple[str, ...],
        targets: array[int],
        is_planned: Callable[[int], int],
        providing: list[tuple[int, ...]],
        provided_by: dict[str, tuple[str, ...]],
    ) -> tuple[list[int], tuple[str, ...]]:
        """The planned services ``declared`` resolves to, and the names that match none.

        Adds each virtual name that has planned providers to ``provided_by``.
        """
        found_all: list[int] = []
        missing: list[str] = []
        for name, target in zip(declared, targets, strict=True):
            if target >= 0:
                if is_planned(target):
                    found_all.append(target)
                else:
                    missing.append(name)
                continue
            found = providing[~target]
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


def _check_reserved(service: Service, *, alias: bool = False) -> None:
    """PlanError for a plugin's service that takes a name of noderole's own units, as its
    name or (``alias``) as a name it provides: render makes an alias a unit link too."""
    if service.origin != "builtin":
        who = f"plugin {service.origin!r}" if service.origin else "an unnamed plugin"
        taken = (
            f"provides {sorted(RESERVED_NAMES & set(service.provide))[0]!r}, a name"
            if alias
            else "takes a name"
        )
        raise PlanError(
            f"service {service.name!r} of {who} {taken} reserved for noderole's own boot "
            "entry and renew job (their unit and runscript files are named so): rename the "
            "service in the plugin, or disable it with --disable-plugin NAME"
        )


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
