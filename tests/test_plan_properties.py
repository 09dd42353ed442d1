"""Properties of build_plan on random graphs: every ordering holds, every reported cycle is real."""

from __future__ import annotations

import itertools
import random
import re
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderole import plan as plan_module
from noderole import recordclass
from noderole.errors import PlanError
from noderole.plan import KINDS, PlannedService, build_plan
from noderole.records import Service, unknown_names
from tests.strategies import ROLE, acyclic_services, cyclic_services

_CYCLE = re.compile(r"dependency cycle in role '[^']*': (\S+(?: → \S+)+) \(")


def _providers(services: list[Service]) -> dict[str, set[str]]:
    real = {s.name for s in services}
    providers: dict[str, set[str]] = {}
    for service in services:
        for virtual in service.provide:
            if virtual not in real:
                providers.setdefault(virtual, set()).add(service.name)
    return providers


def _expected_members(services: list[Service]) -> set[str]:
    """The model of the plan's membership: the role, plus need/want targets, transitively."""
    by_name = {s.name: s for s in services}
    providers = _providers(services)
    seed = {s.name for s in services if ROLE in s.roles}
    members = set(seed)
    queue = deque(seed)
    while queue:
        service = by_name[queue.popleft()]
        for target in (*service.need, *service.want):
            if target in by_name:
                pulled = {target}
            else:
                known = providers.get(target, set())
                pulled = (known & seed) or known
            for name in pulled - members:
                members.add(name)
                queue.append(name)
    return members


def _orderings(services: list[Service], members: set[str]) -> set[tuple[str, str]]:
    """``(first, then)`` for every ordering constraint between planned services."""
    providers = _providers(services)
    by_name = {s.name for s in services}

    def planned(target: str) -> set[str]:
        found = {target} if target in by_name else providers.get(target, set())
        return found & members

    pairs: set[tuple[str, str]] = set()
    for service in services:
        if service.name not in members:
            continue
        for target in (*service.need, *service.want, *service.use, *service.after):
            pairs.update((first, service.name) for first in planned(target))
        for target in service.before:
            pairs.update((service.name, then) for then in planned(target))
    return pairs


def _model_edges(services: list[Service]) -> set[tuple[str, str]]:
    """``(waiter, waited)`` over services and virtual names, every service planned."""
    names = {s.name for s in services}
    providers = _providers(services)
    edges: set[tuple[str, str]] = set()
    for virtual, provided_by in providers.items():
        edges.update((virtual, p) for p in provided_by)
    for service in services:
        for target in (*service.need, *service.want, *service.use, *service.after):
            if target in names or target in providers:
                edges.add((service.name, target))
        for target in service.before:
            if target in names:
                edges.add((target, service.name))
            else:
                edges.update((p, service.name) for p in providers.get(target, ()))
    return edges


def _assert_resolved_by_the_rules(services: list[Service]) -> None:
    """Each planned service's ``resolved``, ``unresolved`` and ``provided_by`` against a model
    built from the declarations alone."""
    plan = build_plan(services, ROLE)
    members = set(plan.names())
    real = {s.name for s in services}
    providers = _providers(services)
    for planned in plan.services:
        resolved: dict[str, tuple[str, ...]] = {}
        unresolved: dict[str, tuple[str, ...]] = {}
        provided_by: dict[str, tuple[str, ...]] = {}
        for kind in KINDS:
            found: list[str] = []
            missing: list[str] = []
            for target in getattr(planned.service, kind):
                if target in real:
                    hits = [target] if target in members else []
                else:
                    hits = sorted(providers.get(target, set()) & members)
                    if hits:
                        provided_by[target] = tuple(hits)
                found.extend(hits)
                if not hits:
                    missing.append(target)
            if found:
                resolved[kind] = tuple(dict.fromkeys(found))
            if missing:
                unresolved[kind] = tuple(missing)
        assert list(planned.resolved.items()) == list(resolved.items())
        assert list(planned.unresolved.items()) == list(unresolved.items())
        assert list(planned.provided_by.items()) == list(provided_by.items())
        assert planned.needs == resolved.get("need", ())
        assert planned.wants == resolved.get("want", ())
        assert planned.uses == resolved.get("use", ())


def _with_repeats(service: Service, rng: random.Random) -> Service:
    """``service`` with some declared names repeated, within a word or in another word that
    orders the same way (a ``want`` repeated as an ``after``)."""
    words = {kind: list(getattr(service, kind)) for kind in KINDS}
    for kind in KINDS:
        for name in list(words[kind]):
            if rng.random() < 0.5:
                words[kind].insert(rng.randrange(len(words[kind]) + 1), name)
    for name in service.want:
        if rng.random() < 0.5:
            words["after"].append(name)
    return Service(
        name=service.name,
        roles=service.roles,
        provide=service.provide,
        need=words["need"],
        want=words["want"],
        use=words["use"],
        after=words["after"],
        before=words["before"],
    )


class TestAcyclicGraphs:
    @settings(max_examples=80, deadline=None)
    @given(acyclic_services())
    def test_every_ordering_constraint_holds(self, services: list[Service]) -> None:
        """For every ordering a→b among planned services, a sits in an earlier wave than b."""
        plan = build_plan(services, ROLE)
        members = set(plan.names())
        wave = {p.name: p.wave for p in plan.services}
        for first, then in _orderings(services, members):
            assert wave[first] < wave[then], (first, then)

    @settings(max_examples=80, deadline=None)
    @given(acyclic_services())
    def test_membership_is_the_role_plus_what_it_needs_and_wants(
        self, services: list[Service]
    ) -> None:
        """The plan holds exactly the role's services and their need/want closure."""
        plan = build_plan(services, ROLE)
        assert set(plan.names()) == _expected_members(services)

    @settings(max_examples=80, deadline=None)
    @given(acyclic_services())
    def test_waves_are_as_early_as_possible(self, services: list[Service]) -> None:
        """Wave 0 waits for nothing; a service in wave n waits for one in wave n-1, none later."""
        plan = build_plan(services, ROLE)
        for planned in plan.services:
            waves = [plan[name].wave for name in planned.after]
            assert planned.wave == (max(waves) + 1 if waves else 0)

    @settings(max_examples=50, deadline=None)
    @given(acyclic_services(), st.randoms(use_true_random=False))
    def test_input_order_does_not_matter(self, services: list[Service], rng: random.Random) -> None:
        """Shuffling the services the plugins returned gives the very same plan."""
        shuffled = list(services)
        rng.shuffle(shuffled)
        assert build_plan(shuffled, ROLE).to_dict() == build_plan(services, ROLE).to_dict()


class TestPlanContents:
    """What each planned service records, against models built from the declarations alone."""

    @settings(max_examples=80, deadline=None)
    @given(acyclic_services())
    def test_start_order_is_by_wave_then_by_name(self, services: list[Service]) -> None:
        """Services start wave by wave, by name within a wave; ``waves`` lists the same names."""
        plan = build_plan(services, ROLE)
        keys = [(planned.wave, planned.name) for planned in plan.services]
        assert keys == sorted(keys)
        assert plan.waves == tuple(
            tuple(name for wave, name in keys if wave == number)
            for number in range(len(plan.waves))
        )
        assert all(plan.waves)

    @settings(max_examples=80, deadline=None)
    @given(acyclic_services())
    def test_after_is_every_predecessor_once_by_name(self, services: list[Service]) -> None:
        """Each service's ``after`` is exactly the services ordered before it, sorted by name."""
        plan = build_plan(services, ROLE)
        before: dict[str, set[str]] = {name: set() for name in plan.names()}
        for first, then in _orderings(services, set(plan.names())):
            before[then].add(first)
        for planned in plan.services:
            assert planned.after == tuple(sorted(before[planned.name])), planned.name

    @settings(max_examples=50, deadline=None)
    @given(acyclic_services())
    def test_dependents_are_the_services_after_it_in_start_order(
        self, services: list[Service]
    ) -> None:
        """dependents(x) lists, in start order, every service whose ``after`` holds x."""
        plan = build_plan(services, ROLE)
        for planned in plan.services:
            expected = tuple(p.name for p in plan.services if planned.name in p.after)
            assert plan.dependents(planned.name) == expected

    @settings(max_examples=80, deadline=None)
    @given(acyclic_services())
    def test_each_declared_name_resolves_by_the_rules(self, services: list[Service]) -> None:
        """A declared name resolves to its planned service, or to a virtual name's planned
        providers by name (recorded in ``provided_by``), or lands in ``unresolved``; ``resolved``
        keeps declared order without repeats."""
        _assert_resolved_by_the_rules(services)

    @settings(max_examples=80, deadline=None)
    @given(acyclic_services(), st.randoms(use_true_random=False))
    def test_a_name_declared_twice_resolves_once(
        self, services: list[Service], rng: random.Random
    ) -> None:
        """Names repeated within a word (``need: [a, a]``) or in another word that orders the
        same way (a want repeated as an after) resolve by the same rules (each word's
        ``resolved`` names a service once), and leave ``after``, the waves and ``provided_by``
        as they were."""
        repeated = [_with_repeats(service, rng) for service in services]
        _assert_resolved_by_the_rules(repeated)
        plan, reference = build_plan(repeated, ROLE), build_plan(services, ROLE)
        for planned, expected in zip(plan.services, reference.services, strict=True):
            assert (planned.name, planned.wave, planned.after) == (
                expected.name,
                expected.wave,
                expected.after,
            )
            assert planned.provided_by == expected.provided_by
        assert plan.waves == reference.waves

    @settings(max_examples=80, deadline=None)
    @given(acyclic_services())
    def test_pulled_in_by_is_the_first_to_pull_breadth_first(self, services: list[Service]) -> None:
        """From the role's services by name, need before want, in declared order: the first
        service to pull another in is recorded as its ``pulled_in_by``."""
        plan = build_plan(services, ROLE)
        by_name = {s.name: s for s in services}
        providers = _providers(services)
        seed = {s.name for s in services if ROLE in s.roles}
        members = set(seed)
        pulled_in_by: dict[str, str] = {}
        queue = deque(sorted(seed))
        while queue:
            name = queue.popleft()
            for target in (*by_name[name].need, *by_name[name].want):
                if target in by_name:
                    pulled = [target]
                else:
                    known = providers.get(target, set())
                    pulled = sorted(known & seed) or sorted(known)
                for other in pulled:
                    if other not in members:
                        members.add(other)
                        pulled_in_by[other] = name
                        queue.append(other)
        for planned in plan.services:
            assert planned.in_role == (planned.name in seed)
            assert planned.pulled_in_by == pulled_in_by.get(planned.name)

    @settings(max_examples=80, deadline=None)
    @given(acyclic_services())
    def test_warnings_name_every_unknown_declaration(self, services: list[Service]) -> None:
        """Every planned service's after/before/use/want name that nobody has is warned about,
        in start order."""
        plan = build_plan(services, ROLE)
        assert list(plan.warnings) == unknown_names([p.service for p in plan.services], services)


class TestCyclicGraphs:
    @settings(max_examples=80, deadline=None)
    @given(cyclic_services())
    def test_reported_cycle_is_a_real_cycle(self, services: list[Service]) -> None:
        """A graph with a cycle is refused, and each hop of the printed cycle is a real edge."""
        with pytest.raises(PlanError) as caught:
            build_plan(services, ROLE)
        match = _CYCLE.search(str(caught.value))
        assert match is not None, str(caught.value)
        nodes = match.group(1).split(" → ")
        assert nodes[0] == nodes[-1]
        edges = _model_edges(services)
        for hop in itertools.pairwise(nodes):
            assert hop in edges, (hop, str(caught.value))

    @settings(max_examples=50, deadline=None)
    @given(cyclic_services())
    def test_reported_cycle_names_each_node_once(self, services: list[Service]) -> None:
        """The printed cycle is simple: no node but the first repeats."""
        with pytest.raises(PlanError) as caught:
            build_plan(services, ROLE)
        match = _CYCLE.search(str(caught.value))
        assert match is not None
        nodes = match.group(1).split(" → ")
        assert len(set(nodes[:-1])) == len(nodes) - 1


class TestPlannedRecords:
    """The planner builds each PlannedService field by field, past its keyword ``__init__``."""

    def test_the_planner_knows_every_field(self) -> None:
        """The planner's list of PlannedService's fields is the class's own, in order."""
        fields = tuple(item.name for item in recordclass.fields(PlannedService))
        assert fields == plan_module._PLANNED_FIELDS

    @settings(max_examples=80, deadline=None)
    @given(acyclic_services())
    def test_each_record_is_what_init_builds(self, services: list[Service]) -> None:
        """Every planned service holds the very objects ``PlannedService(...)`` would hold
        after its converters (an empty mapping is the shared empty one), and shows the same."""
        names = plan_module._PLANNED_FIELDS
        for planned in build_plan(services, ROLE).services:
            rebuilt = PlannedService(**{name: getattr(planned, name) for name in names})
            for name in names:
                assert getattr(rebuilt, name) is getattr(planned, name), name
            assert rebuilt == planned
            assert repr(rebuilt) == repr(planned)
