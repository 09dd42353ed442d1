"""Hypothesis strategies for noderole's records and graphs (one module, shared by every test).

Service names are ``s0``, ``s1``...; virtual names ``v0``, ``v1``...; ``ghost`` names nothing. The
graph strategies return the services and the role to plan, ``"r"``.
"""

from __future__ import annotations

from hypothesis import strategies as st

from noderole.plan import KINDS, Kind
from noderole.records import Service

__all__ = ["ROLE", "acyclic_services", "cyclic_services", "json_values", "state_documents"]

ROLE = "r"
"""The role every graph strategy plans."""

_GHOST = "ghost"


def _virtuals(draw: st.DrawFn, count: int, *, allow_empty: bool) -> dict[str, list[int]]:
    """Virtual name -> indexes of its providers (an empty list makes it an absent name)."""
    virtuals: dict[str, list[int]] = {}
    for k in range(draw(st.integers(0, 3))):
        providers = draw(
            st.lists(
                st.integers(0, count - 1),
                min_size=0 if allow_empty else 1,
                max_size=3,
                unique=True,
            )
        )
        virtuals[f"v{k}"] = sorted(providers)
    return virtuals


def _services(
    count: int,
    roles: list[tuple[str, ...]],
    declared: list[dict[Kind, list[str]]],
    virtuals: dict[str, list[int]],
) -> list[Service]:
    services = []
    for i in range(count):
        services.append(
            Service(
                name=f"s{i}",
                roles=roles[i],
                provide=[v for v, providers in virtuals.items() if i in providers],
                need=declared[i]["need"],
                want=declared[i]["want"],
                use=declared[i]["use"],
                after=declared[i]["after"],
                before=declared[i]["before"],
            )
        )
    return services


@st.composite
def acyclic_services(draw: st.DrawFn, max_services: int = 12) -> list[Service]:
    """Services whose dependencies cannot form a cycle, with a mix of every word.

    Service ``i`` waits (need/want/use/after) only for lower indexes and declares ``before`` only
    on higher ones; a virtual name is referred to only where all its providers sit on the right
    side. Roles are random (at least one service is in :data:`ROLE`), so some services are pulled
    in and some references name services outside the plan. ``need`` always names something.
    """
    count = draw(st.integers(1, max_services))
    virtuals = _virtuals(draw, count, allow_empty=True)
    roles = [
        draw(st.sampled_from([(), (ROLE,), (ROLE, "other"), ("other",)])) for _ in range(count)
    ]
    in_role = draw(st.integers(0, count - 1))
    if ROLE not in roles[in_role]:
        roles[in_role] = (*roles[in_role], ROLE)
    declared: list[dict[Kind, list[str]]] = []
    for i in range(count):
        lower = [f"s{j}" for j in range(i)]
        higher = [f"s{j}" for j in range(i + 1, count)]
        waits_for = [v for v, p in virtuals.items() if p and max(p) < i]
        starts_before = [v for v, p in virtuals.items() if p and min(p) > i]
        absent = [_GHOST, *(v for v, p in virtuals.items() if not p)]
        choices: dict[Kind, list[str]] = {
            "need": lower + waits_for,
            "want": lower + waits_for + absent,
            "use": lower + waits_for + absent,
            "after": lower + waits_for + absent,
            "before": higher + starts_before + absent,
        }
        declared.append(
            {
                kind: draw(st.lists(st.sampled_from(options), max_size=3, unique=True))
                if options
                else []
                for kind, options in choices.items()
            }
        )
    return _services(count, roles, declared, virtuals)


@st.composite
def cyclic_services(draw: st.DrawFn, max_services: int = 10) -> list[Service]:
    """Services, all in :data:`ROLE`, whose dependencies contain at least one cycle.

    Random edges of every word are drawn first (they may add more cycles, self-loops included);
    then a cycle ``c0 → c1 → ... → c0`` is forced, each hop made by a random word (``before``
    declared by the later node), sometimes through a virtual name provided by the hop's target.
    """
    count = draw(st.integers(1, max_services))
    virtuals = _virtuals(draw, count, allow_empty=False)
    names = [f"s{i}" for i in range(count)]
    options = names + list(virtuals)
    declared: list[dict[Kind, list[str]]] = [
        {kind: draw(st.lists(st.sampled_from(options), max_size=2, unique=True)) for kind in KINDS}
        for _ in range(count)
    ]
    cycle = draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=count, unique=True))
    for waiter, waited in zip(cycle, [*cycle[1:], cycle[0]], strict=True):
        kind = draw(st.sampled_from(KINDS))
        if kind == "before":
            target = f"s{waiter}"
            if target not in declared[waited]["before"]:
                declared[waited]["before"].append(target)
            continue
        target = f"s{waited}"
        if draw(st.booleans()):
            # Route the hop through a virtual name that only the waited-for service provides.
            target = f"v{len(virtuals)}"
            virtuals[target] = [waited]
        if target not in declared[waiter][kind]:
            declared[waiter][kind].append(target)
    return _services(count, [(ROLE,)] * count, declared, virtuals)


# --------------------------------------------------------------------------- supervisor state

_JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
json_values = st.recursive(
    _JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
"""Any JSON document (NaN, infinities and integers far past 64 bits included)."""

_STATUS_FIELDS = (
    "name",
    "state",
    "pid",
    "pgid",
    "start_ticks",
    "started_at",
    "restarts",
    "last_exit",
    "log",
    "pidfile",
    "fingerprint",
    "reason",
    "already_running",
)


@st.composite
def state_documents(draw: st.DrawFn) -> object:
    """A state.json document: valid, or valid but for a few fields of the wrong shape."""
    services: dict[str, object] = {}
    for i in range(draw(st.integers(0, 3))):
        record: dict[str, object] = {
            "name": f"s{i}",
            "state": draw(st.sampled_from(["running", "ready", "backoff", "crashed", "stopped"])),
            "pid": draw(st.none() | st.integers(2, 4_000_000)),
            "start_ticks": draw(st.none() | st.integers(0, 2**40)),
            "restarts": draw(st.integers(0, 1000)),
            "fingerprint": "f",
            "reason": "",
        }
        for key in draw(st.lists(st.sampled_from(_STATUS_FIELDS), max_size=2)):
            record[key] = draw(json_values)
        services[f"s{i}"] = record if draw(st.booleans()) else draw(json_values | st.just(record))
    document: dict[str, object] = {"version": 1, "boot_id": "", "services": services}
    for key in draw(st.lists(st.sampled_from(["version", "services", "supervisor"]), max_size=1)):
        document[key] = draw(json_values)
    return document if draw(st.integers(0, 9)) else draw(json_values)
