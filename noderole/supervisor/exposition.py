"""The Prometheus text exposition of noderole's series: the one definition of their names, HELP
lines, types and state vocabulary.

Two writers use it: :mod:`noderole.metrics` (``noderole status --format prometheus``, and
``noderole.prom`` written by the CLI) and the native supervisor daemon, which rewrites
``noderole.prom`` itself when a service changes state behind the CLI's back (a respawn, giving
up). Both render the role-level families first (apply, certificate expiry: written by the CLI,
which alone knows them) and the service families next (:func:`service_families`), so those are
the same whichever wrote the file. The daemon alone appends a last family, its heartbeat
(:func:`heartbeat_family`), while it runs: a file whose heartbeat stops advancing tells the fleet
that nothing supervises the node's services any more (the daemon frozen or killed), which the
service families, frozen at their last state, cannot. Standard library only (the daemon imports
it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = [
    "HEARTBEAT",
    "HEARTBEAT_SERIES",
    "STATES",
    "TEXTFILE",
    "UP_STATES",
    "Exposition",
    "heartbeat_family",
    "labels",
    "service_families",
]

TEXTFILE = "noderole.prom"
"""The file name in node_exporter's textfile collector directory."""

STATES = ("starting", "running", "ready", "backoff", "crashed", "stopped")
"""Every state ``noderole_service_state`` has a series for (one of them is 1). ``backoff``: the
native supervisor waits to respawn a process that exited; init systems report that as
``crashed``."""

UP_STATES = ("running", "ready")
"""States in which ``noderole_service_up`` is 1."""

HEARTBEAT = 60.0
"""Seconds between two writes of the file by the native supervisor, at most, while it runs (it
rewrites the file with nothing changed once they have passed): what the heartbeat's HELP line
promises."""

HEARTBEAT_SERIES = "noderole_supervisor_heartbeat_timestamp_seconds"
"""The daemon's heartbeat: when it last wrote the file (unix time)."""


def _escape(value: str) -> str:
    """A label value as the exposition format wants it: backslash, quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(**pairs: str) -> str:
    """``{k="v",...}`` with the values escaped."""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs.items()) + "}"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if float(value).is_integer() else repr(float(value))


class Exposition:
    """Families appended one after another; :meth:`text` is the exposition."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(
        self, name: str, kind: str, help_text: str, samples: Iterable[tuple[str, float]]
    ) -> None:
        """Append a family (nothing at all when it has no sample)."""
        rows = list(samples)
        if not rows:
            return
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        self.lines += [f"{name}{text} {_number(value)}" for text, value in rows]

    def text(self) -> str:
        """The exposition, ending with a newline ("" when empty)."""
        return "\n".join(self.lines) + "\n" if self.lines else ""


def service_families(
    out: Exposition, *, role: str, services: Iterable[tuple[str, str, int]]
) -> None:
    """Append ``noderole_service_up``, ``noderole_service_state`` and
    ``noderole_service_restarts_total`` for ``services``: (name, state, restarts) each."""
    rows = list(services)
    out.family(
        "noderole_service_up",
        "gauge",
        "1 when the service is running or ready, else 0.",
        (
            (labels(role=role, service=name), 1 if state in UP_STATES else 0)
            for name, state, _ in rows
        ),
    )
    out.family(
        "noderole_service_state",
        "gauge",
        "The service's state: 1 for the current one.",
        (
            (labels(service=name, state=each), 1 if state == each else 0)
            for name, state, _ in rows
            for each in STATES
        ),
    )
    out.family(
        "noderole_service_restarts_total",
        "counter",
        "Restarts of the service counted by its supervisor.",
        ((labels(service=name), restarts) for name, _, restarts in rows),
    )


def heartbeat_family(out: Exposition, *, role: str, timestamp: float) -> None:
    """Append ``noderole_supervisor_heartbeat_timestamp_seconds{role}``: when the native
    supervisor wrote the file (``timestamp``, unix time). Its writer of the file alone appends
    it, after the service families, and leaves it out of its last write when it exits (a node
    stopped on purpose must not look like a silent supervisor)."""
    out.family(
        HEARTBEAT_SERIES,
        "gauge",
        "When the native supervisor last wrote this file (unix time); it rewrites it at least "
        f"every {HEARTBEAT:g} s while it runs.",
        [(labels(role=role), timestamp)],
    )
