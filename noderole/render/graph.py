"""Draw a plan: waves and dependency edges as terminal text, Graphviz dot or a Mermaid flowchart.

Edges point in start order in the drawings (``net -> k3s``: net starts first) and carry the word
that made them. When several declarations link the same pair, the strongest word labels the edge:
need, then want, then the order-only words use, after and before. The output depends only on the
plan, so it can be committed and diffed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypeAlias

from noderole.plan import KINDS, Kind, Plan

__all__ = ["Format", "edges", "render_graph"]

Format: TypeAlias = Literal["text", "dot", "mermaid"]
"""The drawings :func:`render_graph` makes."""

_DOT_STYLE: dict[Kind, str] = {
    "need": "solid",
    "want": "dashed",
    "use": "dotted",
    "after": "dotted",
    "before": "dotted",
}
_MERMAID_ARROW: dict[Kind, str] = {"need": "==>", "want": "-->"}  # order-only words: "-.->"


def edges(plan: Plan) -> list[tuple[str, str, Kind]]:
    """``(first, then, word)`` for every pair where ``then`` starts after ``first``, in start order.

    ``word`` is the strongest declaration linking the pair (``before`` when only ``first`` declared
    it). Virtual names are already resolved to their planned providers.
    """
    strongest: dict[tuple[str, str], Kind] = {}

    def add(first: str, then: str, kind: Kind) -> None:
        known = strongest.get((first, then))
        if known is None or KINDS.index(kind) < KINDS.index(known):
            strongest[(first, then)] = kind

    for planned in plan.services:
        for kind in KINDS:
            for other in planned.resolved.get(kind, ()):
                if kind == "before":
                    add(planned.name, other, kind)
                else:
                    add(other, planned.name, kind)
    position = {name: index for index, name in enumerate(plan.names())}
    ordered = sorted(strongest.items(), key=lambda i: (position[i[0][1]], position[i[0][0]]))
    return [(first, then, kind) for (first, then), kind in ordered]


def render_graph(plan: Plan, fmt: Format) -> str:
    """The plan drawn as ``text`` (for a terminal), ``dot`` (Graphviz) or ``mermaid``."""
    if fmt == "text":
        return _text(plan)
    if fmt == "dot":
        return _dot(plan)
    if fmt == "mermaid":
        return _mermaid(plan)
    raise ValueError(f"unknown graph format {fmt!r}; use one of: text, dot, mermaid")


def _text(plan: Plan) -> str:
    count = len(plan.services)
    lines = [
        f"role {plan.role}: {count} service{'s' if count != 1 else ''} "
        f"in {len(plan.waves)} wave{'s' if len(plan.waves) != 1 else ''}"
    ]
    lines.extend(f"wave {number}: {', '.join(wave)}" for number, wave in enumerate(plan.waves))
    lines.append("")
    for planned in plan.services:
        parts: list[str] = []
        for kind in KINDS:
            resolved = planned.resolved.get(kind, ())
            names = [_with_virtual(name, planned.provided_by) for name in resolved]
            names += [f"{name} (absent)" for name in planned.unresolved.get(kind, ())]
            if names:
                parts.append(f"{kind} {', '.join(names)}")
        head = planned.name
        if not planned.in_role:
            head += f" [pulled in by {planned.pulled_in_by}]"
        lines.append(f"{head}: {'; '.join(parts)}" if parts else head)
    return "\n".join(lines) + "\n"


def _with_virtual(name: str, provided_by: Mapping[str, tuple[str, ...]]) -> str:
    """``net (for network)`` when ``name`` was reached through a virtual name."""
    virtuals = [virtual for virtual, providers in provided_by.items() if name in providers]
    return f"{name} (for {', '.join(virtuals)})" if virtuals else name


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dot(plan: Plan) -> str:
    lines = [
        f"digraph {_quote('noderole plan: ' + plan.role)} {{",
        "  // Arrows point in start order: a -> b means a starts before b.",
        "  // need: solid; want: dashed; use, after, before: dotted (order only).",
        "  // Grey nodes are not in the role: another service pulled them in.",
        "  rankdir=TB;",
        "  node [shape=box];",
    ]
    for number, wave in enumerate(plan.waves):
        lines.append(f"  subgraph wave_{number} {{")
        lines.append("    rank=same;")
        for name in wave:
            attributes = "" if plan[name].in_role else " [color=gray50, fontcolor=gray30]"
            lines.append(f"    {_quote(name)}{attributes};")
        lines.append("  }")
    for first, then, kind in edges(plan):
        lines.append(
            f"  {_quote(first)} -> {_quote(then)} [label={_quote(kind)}, style={_DOT_STYLE[kind]}];"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mermaid(plan: Plan) -> str:
    # Mermaid ids cannot hold every character a service name may: number the nodes instead.
    ids = {name: f"s{index}" for index, name in enumerate(plan.names())}
    lines = ["graph TD"]
    for number, wave in enumerate(plan.waves):
        lines.append(f'  subgraph wave{number}["wave {number}"]')
        lines.extend(f'    {ids[name]}["{name}"]' for name in wave)
        lines.append("  end")
    for first, then, kind in edges(plan):
        arrow = _MERMAID_ARROW.get(kind, "-.->")
        lines.append(f"  {ids[first]} {arrow}|{kind}| {ids[then]}")
    return "\n".join(lines) + "\n"
