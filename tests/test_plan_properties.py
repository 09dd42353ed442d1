"""Properties of build_plan on random graphs: every ordering holds, every reported cycle is real."""

from __future__ import annotations

import itertools
import random
import re
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderole.errors import PlanError
from noderole.plan import build_plan
from noderole.records import Service
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
