"""The one status schema: what the daemon answers, what the state file keeps, what the client reads.

A :class:`ServiceStatus` is written by the daemon (:meth:`ServiceStatus.to_wire`), sent over the
control socket and stored per service in ``state.json``; both readers decode it with
:meth:`ServiceStatus.from_wire`, which refuses anything of the wrong shape (a wrong type, a
negative or absurd number, ``NaN``) with :class:`SchemaError` naming the field. Standard library
only (the daemon imports it).
"""

from __future__ import annotations

import math

from noderole.supervisor._record import record, replace

__all__ = ["ACTIVE", "STATES", "STOPPING", "SchemaError", "ServiceState", "ServiceStatus"]

TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
if TYPE_CHECKING:
    from typing import Any, Literal, TypeAlias

    ServiceState: TypeAlias = Literal[
        "starting", "running", "ready", "backoff", "crashed", "stopped"
    ]
else:
    ServiceState = str
    """One of :data:`STATES` (a ``Literal`` of them for the type checker)."""
STATES: tuple[ServiceState, ...] = ("starting", "running", "ready", "backoff", "crashed", "stopped")
ACTIVE: frozenset[str] = frozenset(("starting", "running", "ready", "backoff"))
"""States in which the service has (or is about to have) a process."""
STOPPING = "stopping"
"""The reason of a service whose stop is under way: its state is still the one it had."""

_MAX_PID = 1 << 22
"""pid_max's ceiling on Linux (PID_MAX_LIMIT)."""
_MAX_COUNT = 1 << 53
"""Counts and clock ticks above this are not from this supervisor (nor exact as JSON numbers)."""


class SchemaError(ValueError):
    """A status or state file of the wrong shape; ``str()`` names the field."""


@record()
class ServiceStatus:
    """One service as the supervisor sees it."""

    name: str
    """The service name."""
    state: ServiceState = "stopped"
    """``running`` (no readiness check, or not passed yet), ``ready``, ``backoff`` (waiting to
    respawn), ``crashed`` (gave up), ``stopped``; ``starting`` while a replacement is under way."""
    pid: int | None = None
    """The current process (its process group has the same id)."""
    start_ticks: int | None = None
    """The process's start time (``/proc/PID/stat``): tells it from a later process with its pid."""
    started_at: float | None = None
    """Wall-clock time the current process started."""
    restarts: int = 0
    """Respawns since the service was started."""
    last_exit: str | None = None
    """How the last process ended: ``exit 3``, ``signal SIGKILL``, or why it could not start."""
    log: str | None = None
    """Where its output goes (stdout's log, else stderr's)."""
    pidfile: str | None = None
    """Where the child's pid is written."""
    fingerprint: str = ""
    """The fingerprint of the running definition."""
    reason: str = ""
    """Why it is in this state, for people: ``gave up after 3 respawns``, ``not ready after 3s``."""
    already_running: bool = False
    """``start``: it was already running with this fingerprint; nothing was started."""

    @property
    def active(self) -> bool:
        """It has, or is about to have, a process."""
        return self.state in ACTIVE

    @property
    def stopping(self) -> bool:
        """Its process is being stopped (a stop whose client left goes on in the daemon)."""
        return self.reason == STOPPING

    def but(self, **changes: Any) -> ServiceStatus:
        """A copy with ``changes``."""
        return replace(self, **changes)

    def to_wire(self) -> dict[str, Any]:
        """The JSON form (the state file's and the protocol's)."""
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_wire(cls, data: object, *, name: str | None = None) -> ServiceStatus:
        """Decode and check; ``name`` is the key it was stored under. Raises SchemaError."""
        if not isinstance(data, dict):
            raise SchemaError(f"service {name!r}: expected an object, got {_kind(data)}")
        where = f"service {name or data.get('name')!r}"
        unknown = sorted(k for k in data if k not in _FIELDS and k != "pgid")
        if unknown:
            raise SchemaError(f"{where}: unknown field {unknown[0]!r}")
        stored = data.get("name", name)
        if not isinstance(stored, str) or not stored or (name is not None and stored != name):
            raise SchemaError(f"{where}: name must be the service's name, got {stored!r}")
        values: dict[str, Any] = {"name": stored}
        for key, check in _CHECKS.items():
            if key in data:
                values[key] = check(where, key, data[key])
        return cls(**values)


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _optional_int(limit: int, low: int = 0) -> Any:
    def check(where: str, key: str, value: object) -> int | None:
        if value is None:
            return None
        if type(value) is not int or not low <= value < limit:
            raise SchemaError(f"{where}: {key} must be an integer {low}-{limit - 1}, got {value!r}")
        return value

    return check


def _count(where: str, key: str, value: object) -> int:
    if type(value) is not int or not 0 <= value < _MAX_COUNT:
        raise SchemaError(f"{where}: {key} must be a count, got {value!r}")
    return value


def _time(where: str, key: str, value: object) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise SchemaError(f"{where}: {key} must be a time in seconds, got {value!r}")
    if not math.isfinite(value) or not 0 <= value < 1e12:
        raise SchemaError(f"{where}: {key} must be a time in seconds, got {value!r}")
    return float(value)


def _state(where: str, key: str, value: object) -> str:
    if value not in STATES:
        raise SchemaError(f"{where}: {key} must be one of {', '.join(STATES)}, got {value!r}")
    return value


def _text(where: str, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise SchemaError(f"{where}: {key} must be a string, got {_kind(value)}")
    return value


def _optional_text(where: str, key: str, value: object) -> str | None:
    return None if value is None else _text(where, key, value)


def _flag(where: str, key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise SchemaError(f"{where}: {key} must be true or false, got {value!r}")
    return value


_CHECKS: dict[str, Any] = {
    "state": _state,
    "pid": _optional_int(_MAX_PID, low=2),
    "start_ticks": _optional_int(_MAX_COUNT),
    "started_at": _time,
    "restarts": _count,
    "last_exit": _optional_text,
    "log": _optional_text,
    "pidfile": _optional_text,
    "fingerprint": _text,
    "reason": _text,
    "already_running": _flag,
}
_FIELDS = ("name", *_CHECKS)
