"""The plan last applied, kept on the node so ``status`` and ``stop`` need no plugin.

``apply`` (and ``render``) write ``/var/lib/noderole/plan.json``: the role, the backend that
started it, and each planned service's definition minus what only starting needs (pre-start
steps, which may hold functions, and the environment, which may hold secrets). ``status`` and
``stop`` of the recorded role rebuild the plan from it without importing a single plugin, so a
plugin that hangs or raises at import cannot keep the operator from seeing or stopping what runs
(as OpenRC's ``rc-service x stop`` needs no other runscript). A file that is missing, of another
version or of the wrong shape reads as absent: the caller then loads the plugins as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from noderole.records import RecordBase, Secret
from noderole.root import NodeRoot

if TYPE_CHECKING:
    from noderole.plan import Plan
    from noderole.records import Service

__all__ = ["PLAN_FILE", "RecordedPlan", "keeping", "plan_data", "read_plan", "write_plan"]

PLAN_FILE = "/var/lib/noderole/plan.json"
"""Node path of the recorded plan."""

_VERSION = 1
_LISTS = ("roles", "need", "want", "use", "after", "before", "provide")
_SCALARS = (
    "name",
    "description",
    "user",
    "group",
    "working_directory",
    "pidfile",
    "output_log",
    "error_log",
    "origin",
)


@attrs.frozen(kw_only=True, repr=False, eq=False)
class RecordedPlan(RecordBase):
    """What :func:`read_plan` found: the plan and how it was applied."""

    plan: Plan
    """The plan, rebuilt from the recorded definitions (no pre-start steps, no environment)."""
    backend: str
    """Name of the backend that applied it (``native``, ``openrc``, ``systemd``)."""
    noderole_path: str
    """The ``noderole`` executable rendered files call (the openrc and systemd backends')."""


def _service_data(service: Service) -> dict[str, Any]:
    data: dict[str, Any] = {key: getattr(service, key) for key in _SCALARS}
    data.update({key: list(getattr(service, key)) for key in _LISTS})
    data["command"] = None if service.command is None else list(service.command)
    data["supervision"] = attrs.asdict(service.supervision)
    # Names only, never values: status must know a log tail needs redacting (it then asks the
    # plugins for the values, the one case where a plugin-free status loads them).
    data["secret_keys"] = sorted(
        key for key, value in service.environment.items() if isinstance(value, Secret)
    )
    readiness = service.readiness
    data["readiness"] = (
        None
        if readiness is None
        else {"kind": type(readiness).__name__, "fields": attrs.asdict(readiness)}
    )
    return data


def plan_data(plan: Plan, *, backend: str, noderole_path: str) -> dict[str, Any]:
    """The JSON-ready record of ``plan`` (also what :func:`write_plan` writes)."""
    return {
        "version": _VERSION,
        "role": plan.role,
        "backend": backend,
        "noderole_path": noderole_path,
        "services": [_service_data(entry.service) for entry in plan.services],
    }


def keeping(
    root: NodeRoot, data: Mapping[str, Any], *, origins: Iterable[str], names: Iterable[str]
) -> dict[str, Any]:
    """``data`` plus the services the recorded plan of the same role has that ``data`` lacks and
    that come from ``origins`` or are called one of ``names``.

    An apply that went on without a broken plugin neither starts nor stops that plugin's
    services (nor what needs them); they stay recorded, so ``stop`` still stops them.
    """
    origins, names = set(origins), set(names)
    if not origins and not names:
        return dict(data)
    try:
        previous = json.loads(root.resolve(PLAN_FILE).read_text())
        if previous.get("version") != _VERSION or previous.get("role") != data["role"]:
            return dict(data)
        have = {item["name"] for item in data["services"]}
        kept = [
            item
            for item in previous["services"]
            if item["name"] not in have and (item["origin"] in origins or item["name"] in names)
        ]
    except Exception:  # nothing usable recorded: nothing to keep
        return dict(data)
    return {**data, "services": [*data["services"], *kept]}


def write_plan(root: NodeRoot, data: Mapping[str, Any]) -> bool:
    """Record ``data`` (from :func:`plan_data`) unless it is already recorded; True if written."""
    from noderole.state import write_state_file

    text = json.dumps(data, indent=1, sort_keys=True).encode()
    path = root.resolve(PLAN_FILE)
    try:
        if path.read_bytes() == text:
            return False
    except OSError:
        pass
    write_state_file(root, PLAN_FILE, text)
    return True


def _service(data: Mapping[str, Any]) -> Service:
    from noderole.records import WAIT_TYPES, Service, Supervision

    readiness = data["readiness"]
    wait = None
    if readiness is not None:
        kinds = {kind.__name__: kind for kind in WAIT_TYPES}
        wait = kinds[readiness["kind"]](**readiness["fields"])
    fields = {key: data[key] for key in (*_SCALARS, *_LISTS)}
    return Service(
        **fields,
        # A secret whose value is unknown here (empty): see Operations' log-tail redaction.
        environment={key: Secret("") for key in data.get("secret_keys", [])},
        command=data["command"],
        supervision=Supervision(**data["supervision"]),
        readiness=wait,
    )


_LAST_READ: list[tuple[str, str | None, RecordedPlan | None]] = []
"""The last text read and what it gave: ``status`` asks for the plan and then its backend."""


def read_plan(root: NodeRoot, role: str | None = None) -> RecordedPlan | None:
    """The recorded plan (of ``role``, when given), or None when there is none that fits."""
    try:
        text = root.resolve(PLAN_FILE).read_text()
    except (OSError, ValueError):
        return None
    for last_text, last_role, last in _LAST_READ:
        if last_text == text and last_role == role:
            return last  # the same text gives the same plan: not parsed and planned again
    recorded = _parse_plan(text, role)
    _LAST_READ[:] = [(text, role, recorded)]
    return recorded


def _parse_plan(text: str, role: str | None) -> RecordedPlan | None:
    from noderole.plan import build_plan

    try:
        data = json.loads(text)
        if data.get("version") != _VERSION or (role is not None and data["role"] != role):
            return None
        services: Iterable[Service] = [_service(item) for item in data["services"]]
        plan = build_plan(services, data["role"])
        return RecordedPlan(
            plan=plan, backend=str(data["backend"]), noderole_path=str(data["noderole_path"])
        )
    except Exception:
        # Anything unusable (a hand edit, another version, a record that no longer validates)
        # means "not recorded": the caller plans from the plugins instead.
        return None
