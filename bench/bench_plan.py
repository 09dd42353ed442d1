"""Plan time for 1,000 / 10,000 / 100,000 synthetic services with 5 dependencies each.

The services form an acyclic graph with a mix of ``need``, ``want``, ``use``, ``after`` and
``before`` (some through virtual names). Records are built outside the timed region: the figure is
:func:`noderole.plan.build_plan` alone. The peer is the standard library's
:class:`graphlib.TopologicalSorter` run over the same (already resolved) edges: it only sorts, so
the gap is what resolving names, virtual providers and waves costs on top of a bare topological
sort. Times are this process's CPU time (``time.process_time``) for both: on a shared machine,
wall time also counts the time spent waiting for a core, which swamps the growth being measured.

Every size is measured the same way, so the growth factors compare like with like: the same
dependency shape (5 dependencies per service, the same mix of words and virtual names), the same
number of samples (9), one build per sample, the collector emptied before each, and the built plan
freed after the clock stops (the peer's result is a flat tuple; freeing a plan of 100,000 records
is not part of building it). The sizes are measured in interleaved rounds, so a change in the
machine's load during the run falls on every size alike instead of on whichever size was running.
A growth factor is the ratio of the two sizes' medians; its spread is the range of the rounds'
own ratios (how much the load moved during the run).

Run alone: ``python -m bench.bench_plan [--quick]``.

``python -m bench.bench_plan --instructions [--quick]`` counts instructions instead of time, with
valgrind (callgrind), for the 10,000 -> 100,000 step (100 -> 1,000 with ``--quick``): the work each
side does, which the machine's caches and TLB cannot move. Each figure is a child process that
builds the services and plans them, less the same child that stops before planning. It takes
several minutes (valgrind runs the 100,000-service child at about a fiftieth of its speed), so it
is not part of ``python -m bench``.

``python -m bench.bench_plan --phases [--quick]`` times each phase of ``build_plan`` apart (the
graph's set-up, where every declared name is looked up; the closure; the edges; the waves; the
planned records), measured as ``run`` measures the whole, and prints each phase's growth: where the
time above tenfold goes.
"""

from __future__ import annotations

import functools
import gc
import graphlib
import itertools
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from bench._common import Row, summarize
from noderole.plan import Plan, _Graph, build_plan
from noderole.records import Service

__all__ = ["PHASES", "count_instructions", "instructions", "phases", "run", "synthetic_services"]

EDGES_PER_SERVICE = 5
ROLE = "bench"


def synthetic_services(count: int, *, seed: int = 1) -> list[Service]:
    """``count`` services with 5 dependencies each, acyclic by construction.

    Service ``i`` may need/want/use/start after only services with a smaller index, and may start
    before only services with a larger index. One service in fifty provides a virtual name
    (``v<k>``) that later services refer to. Nine services in ten are in the role; the tenth is
    pulled in through needs and wants or left out (then ``use``/``after`` on it order nothing).
    """
    rng = random.Random(seed)
    names = [f"s{i:06d}" for i in range(count)]
    virtual_of: dict[int, str] = {i: f"v{i}" for i in range(0, count, 50)}
    virtual_indexes = sorted(virtual_of)
    services: list[Service] = []
    for i, name in enumerate(names):
        kinds: dict[str, list[str]] = {k: [] for k in ("need", "want", "use", "after", "before")}
        for _ in range(EDGES_PER_SERVICE if i else 0):
            kind = rng.choice(("need", "want", "use", "after", "after", "before"))
            if kind == "before":
                if i + 1 < count:
                    kinds["before"].append(names[rng.randrange(i + 1, count)])
                continue
            j = rng.randrange(0, i)
            if rng.random() < 0.1 and virtual_indexes[0] < i:
                # A virtual provided by an earlier service keeps the graph acyclic.
                k = virtual_indexes[rng.randrange(0, _count_below(virtual_indexes, i))]
                kinds[kind].append(virtual_of[k])
            else:
                kinds[kind].append(names[j])
        services.append(
            Service(
                name=name,
                roles=[ROLE] if i % 10 else [],
                provide=[virtual_of[i]] if i in virtual_of else [],
                need=kinds["need"],
                want=kinds["want"],
                use=kinds["use"],
                after=kinds["after"],
                before=kinds["before"],
            )
        )
    return services


def _count_below(ordered: list[int], bound: int) -> int:
    lo, hi = 0, len(ordered)
    while lo < hi:
        mid = (lo + hi) // 2
        if ordered[mid] < bound:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _sort_only(edges: dict[str, set[str]]) -> tuple[str, ...]:
    return tuple(graphlib.TopologicalSorter(edges).static_order())


def _timed(action: Callable[[], object]) -> float:
    """CPU seconds of one ``action()``; what it returns is freed after the clock stops."""
    gc.collect()
    start = time.process_time()
    result = action()
    elapsed = time.process_time() - start
    del result
    return elapsed


def run(quick: bool) -> list[Row]:
    """Median plan time per size, then the growth factor between consecutive sizes."""
    sizes = (100, 1_000) if quick else (1_000, 10_000, 100_000)
    repeat = 3 if quick else 9
    services = {size: synthetic_services(size) for size in sizes}
    edges: dict[int, dict[str, set[str]]] = {}
    planned: dict[int, int] = {}
    for size in sizes:
        plan = build_plan(services[size], ROLE)
        edges[size] = {p.name: set(p.after) for p in plan.services}
        planned[size] = len(plan)
        del plan  # not kept alive while the others are timed
    ours: dict[int, list[float]] = {size: [] for size in sizes}
    peer: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(repeat):
        for size in sizes:
            ours[size].append(_timed(functools.partial(build_plan, services[size], ROLE)))
            peer[size].append(_timed(functools.partial(_sort_only, edges[size])))
    rows: list[Row] = []
    for size in sizes:
        median, spread, _ = summarize(ours[size])
        peer_median, peer_spread, _ = summarize(peer[size])
        rows.append(
            Row(
                benchmark=(
                    f"plan {size:,} services ({planned[size]} planned, {EDGES_PER_SERVICE} deps)"
                ),
                unit="s CPU",
                median=median,
                spread=spread,
                samples=repeat,
                peer="graphlib.TopologicalSorter (sort only)",
                peer_median=peer_median,
                peer_spread=peer_spread,
                target="<= 1 s at 10,000" if size == 10_000 else "",
            )
        )
    rows.append(_record_bytes(sizes[-1]))
    # The peer's growth is the yardstick: past a few MB, dicts of strings miss the CPU caches and
    # any Python graph code grows somewhat faster than linearly on the same machine.
    for small, large in itertools.pairwise(sizes):
        rows.append(
            _growth_row(
                f"plan time growth {small:,} -> {large:,} services",
                ours[large],
                ours[small],
                peer=("graphlib.TopologicalSorter growth", peer[large], peer[small]),
                target="<= 11x per tenfold step",
            )
        )
    return rows


def _record_bytes(count: int) -> Row:
    """Memory the plan's input takes per service: each record and what it alone holds (its
    name, its declarations, and whatever defaults it does not share with the others)."""
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        services = synthetic_services(count, seed=2)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del services
    return Row(
        benchmark=f"service records, memory per service ({count:,} services)",
        unit="bytes",
        median=held / count,
        spread=0.0,
        samples=1,
    )


def _growth_row(
    benchmark: str,
    large: list[float],
    small: list[float],
    *,
    peer: tuple[str, list[float], list[float]] | None = None,
    target: str = "",
) -> Row:
    """The growth from ``small``'s samples to ``large``'s (and the peer's beside it)."""
    return Row(
        benchmark=benchmark,
        unit="x",
        median=_growth(large, small),
        spread=_spread(large, small),
        samples=len(large),
        peer=None if peer is None else peer[0],
        peer_median=None if peer is None else _growth(peer[1], peer[2]),
        peer_spread=None if peer is None else _spread(peer[1], peer[2]),
        target=target,
    )


def _growth(large: list[float], small: list[float]) -> float:
    """The ratio of the medians: each median shrugs off a sample or two taken under a spike of
    load, which a ratio of single samples cannot."""
    return statistics.median(large) / statistics.median(small)


def _spread(large: list[float], small: list[float]) -> float:
    """The range of the rounds' own ratios (the two sizes of a round ran back to back)."""
    ratios = [big / little for big, little in zip(large, small, strict=True)]
    return max(ratios) - min(ratios)


PHASES = ("graph set-up", "closure", "edges", "waves", "records")
"""The phases of :func:`noderole.plan.build_plan`, in order (see :func:`timed_phases`)."""


def timed_phases(services: list[Service], role: str) -> tuple[list[float], Plan]:
    """CPU seconds of each of :data:`PHASES` in one build of the plan, and the plan (freed by
    the caller after the clock stops). The calls are ``noderole.plan._build_plan``'s, in its
    order, with the collector off as ``build_plan`` keeps it; a test checks that they build the
    plan ``build_plan`` builds."""
    clock = time.process_time
    paused = gc.isenabled()
    gc.disable()
    try:
        ticks = [clock()]
        graph = _Graph(services, role, ())
        ticks.append(clock())
        member, pulled_in_by = graph.closure(role)
        ticks.append(clock())
        providing = graph.planned_providers(member)
        befores = graph.before_edges(member, providing)
        ticks.append(clock())
        levels = graph.levels(member, providing, befores)
        ticks.append(clock())
        if levels is None:
            raise ValueError("the services form a cycle: time the phases of an acyclic graph")
        plan = graph.plan(role, member, pulled_in_by, providing, befores, levels)
        ticks.append(clock())
    finally:
        if paused:
            gc.enable()
    return [end - start for start, end in itertools.pairwise(ticks)], plan


def phases(quick: bool) -> list[Row]:
    """Median CPU time of each phase per size, then each phase's growth between sizes."""
    sizes = (100, 1_000) if quick else (1_000, 10_000, 100_000)
    repeat = 3 if quick else 9
    services = {size: synthetic_services(size) for size in sizes}
    samples: dict[int, list[list[float]]] = {size: [] for size in sizes}
    for _ in range(repeat):
        for size in sizes:  # interleaved, as in ``run``
            gc.collect()
            times, plan = timed_phases(services[size], ROLE)
            del plan
            samples[size].append(times)
    rows: list[Row] = []
    for index, phase in enumerate(PHASES):
        per_size = {size: [times[index] for times in samples[size]] for size in sizes}
        for size in sizes:
            median, spread, _ = summarize(per_size[size])
            rows.append(
                Row(
                    benchmark=f"plan phase {phase}, {size:,} services",
                    unit="s CPU",
                    median=median,
                    spread=spread,
                    samples=repeat,
                )
            )
        rows.extend(
            _growth_row(
                f"plan phase {phase}, growth {small:,} -> {large:,} services",
                per_size[large],
                per_size[small],
            )
            for small, large in itertools.pairwise(sizes)
        )
    return rows


# The child of an instruction count: the same services and edges as ``run`` builds, then nothing
# ("none"), build_plan ("plan") or the peer's sort ("sort"). The baseline differs from the others
# only by the call being counted.
_CHILD = """
import gc, sys
from bench.bench_plan import ROLE, _sort_only, synthetic_services
from noderole.plan import build_plan
services = synthetic_services(int(sys.argv[1]))
plan = build_plan(services, ROLE)
edges = {p.name: set(p.after) for p in plan.services}
del plan
gc.collect()
if sys.argv[2] == "plan":
    build_plan(services, ROLE)
elif sys.argv[2] == "sort":
    _sort_only(edges)
"""

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_REFS = re.compile(r"^==\d+== (?:I\s+refs|Collected)\s*:\s*([\d,]+)", re.MULTILINE)


def count_instructions(argv: list[str]) -> int:
    """Instructions ``argv`` executes (a Python child), counted by callgrind."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=_REPO,  # the child imports ``bench`` (not installed) from the checkout
        # The same string hashes every run: a dict's probe sequence, and so the count, repeat.
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    found = _REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"valgrind {' '.join(argv)} failed: {done.stderr.strip()[-500:]}")
    return int(found.group(1).replace(",", ""))


def instructions(quick: bool) -> list[Row]:
    """Instructions of build_plan and of the peer's sort at two sizes, and their growth."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (Debian: apt-get install valgrind)")
    sizes = (100, 1_000) if quick else (10_000, 100_000)
    jobs = [(size, mode) for size in sizes for mode in ("none", "plan", "sort")]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        counted = dict(
            zip(
                jobs,
                pool.map(
                    lambda job: count_instructions(
                        [sys.executable, "-c", _CHILD, str(job[0]), job[1]]
                    ),
                    jobs,
                ),
                strict=True,
            )
        )
    ours = {size: counted[size, "plan"] - counted[size, "none"] for size in sizes}
    peer = {size: counted[size, "sort"] - counted[size, "none"] for size in sizes}
    rows = [
        Row(
            benchmark=f"plan {size:,} services: instructions (callgrind)",
            unit="M instructions",
            median=ours[size] / 1e6,
            spread=0.0,
            samples=1,
            peer="graphlib.TopologicalSorter (sort only)",
            peer_median=peer[size] / 1e6,
            peer_spread=0.0,
        )
        for size in sizes
    ]
    small, large = sizes
    rows.append(
        Row(
            benchmark=f"plan instruction growth {small:,} -> {large:,} services",
            unit="x",
            median=ours[large] / ours[small],
            spread=0.0,
            samples=1,
            peer="graphlib.TopologicalSorter growth",
            peer_median=peer[large] / peer[small],
            peer_spread=0.0,
            target="linear: 10x per tenfold step",
        )
    )
    return rows


def main(argv: list[str]) -> None:
    """Print the figures."""
    rows = instructions if "--instructions" in argv else phases if "--phases" in argv else run
    for row in rows(quick="--quick" in argv):
        peer = ""
        if row.peer is not None and row.peer_median is not None:
            peer = f"   peer {row.peer}: {row.peer_median:.4f} {row.unit}"
        target = f"   target {row.target}" if row.target else ""
        print(
            f"{row.benchmark}: {row.median:.4f} {row.unit} (spread {row.spread:.4f}){peer}{target}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
