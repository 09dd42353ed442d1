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

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from noderole.reading import RECORD_LIMIT as PLAN_LIMIT
from noderole.reading import read_json, read_regular
from noderole.root import NodeRoot
from noderole.supervisor import _jsontext as jsontext

if TYPE_CHECKING:
    from noderole.plan import Plan
    from noderole.records import Secret, Service

__all__ = [
    "PLAN_FILE",
    "RecordedEntry",
    "RecordedPlan",
    "RecordedService",
    "RecordedView",
    "keeping",
    "left_out",
    "left_out_services",
    "plan_data",
    "read_plan",
    "read_view",
    "write_plan",
]

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


class RecordedPlan:
    """What :func:`read_plan` found: the plan and how it was applied.

    A plain class (not attrs): ``status`` imports this module, and it must not pay for attrs.
    """

    __slots__ = ("backend", "noderole_path", "plan")

    def __init__(self, *, plan: Plan, backend: str, noderole_path: str) -> None:
        self.plan = plan
        """The plan, rebuilt from the recorded definitions (no pre-start steps, no environment)."""
        self.backend = backend
        """Name of the backend that applied it (``native``, ``openrc``, ``systemd``)."""
        self.noderole_path = noderole_path
        """The ``noderole`` executable rendered files call (the openrc and systemd backends')."""


class RecordedService:
    """A recorded service as ``status`` shows it: the fields it reads, no record built."""

    __slots__ = ("command", "error_log", "name", "output_log", "readiness", "secret_keys")

    def __init__(
        self,
        *,
        name: str,
        command: Sequence[str] | None,
        output_log: str | None,
        error_log: str | None,
        readiness: Mapping[str, Any] | None,
        secret_keys: Sequence[str],
    ) -> None:
        self.name = name
        self.command = command
        self.output_log = output_log
        self.error_log = error_log
        self.readiness = readiness
        """The recorded readiness check (its kind and fields), or None."""
        self.secret_keys = tuple(secret_keys)

    @property
    def environment(self) -> Mapping[str, Secret]:
        """The secrets of its environment, by name, values unknown (as :func:`read_plan`'s)."""
        from noderole.records import Secret

        return {key: Secret("") for key in self.secret_keys}


class RecordedEntry:
    """One service of a :class:`RecordedView`, in start order."""

    __slots__ = ("name", "service")

    def __init__(self, service: RecordedService) -> None:
        self.name = service.name
        self.service = service


class RecordedView:
    """The recorded plan as ``status`` reads it: the role, its services in start order and how
    it was applied, without records, attrs or planning (:func:`read_view`)."""

    __slots__ = ("_names", "backend", "noderole_path", "role", "services")

    def __init__(
        self, *, role: str, services: Sequence[RecordedService], backend: str, noderole_path: str
    ) -> None:
        self.role = role
        self.services = tuple(RecordedEntry(service) for service in services)
        self.backend = backend
        self.noderole_path = noderole_path
        self._names = frozenset(service.name for service in services)

    def __contains__(self, name: object) -> bool:
        return name in self._names


def _service_data(service: Service) -> dict[str, Any]:
    from noderole import recordclass
    from noderole.records import Secret

    data: dict[str, Any] = {key: getattr(service, key) for key in _SCALARS}
    data.update({key: list(getattr(service, key)) for key in _LISTS})
    data["command"] = None if service.command is None else list(service.command)
    data["supervision"] = recordclass.asdict(service.supervision)
    # Names only, never values: status must know a log tail needs redacting (it then asks the
    # plugins for the values, the one case where a plugin-free status loads them).
    data["secret_keys"] = sorted(
        key for key, value in service.environment.items() if isinstance(value, Secret)
    )
    readiness = service.readiness
    data["readiness"] = (
        None
        if readiness is None
        else {
            "kind": type(readiness).__name__,
            # Lists, as JSON reads them back: write_plan compares the record it reads with this.
            "fields": {
                key: list(value) if isinstance(value, tuple) else value
                for key, value in recordclass.asdict(readiness).items()
            },
        }
    )
    return data


def plan_data(plan: Plan, *, backend: str, noderole_path: str) -> dict[str, Any]:
    """The JSON-ready record of ``plan`` (also what :func:`write_plan` writes).

    ``in_order`` says the services are listed in the plan's start order, so :func:`read_view`
    can show them without planning again (:func:`keeping` appends services out of order).
    """
    return {
        "version": _VERSION,
        "role": plan.role,
        "backend": backend,
        "noderole_path": noderole_path,
        "services": [_service_data(entry.service) for entry in plan.services],
        "in_order": True,
    }


def _recorded(root: NodeRoot) -> dict[str, Any] | None:
    """plan.json as JSON, when it is a document of this version; None when there is none, or
    one that is damaged (a FIFO, a device, too large, not JSON) or of another version."""
    try:
        data = read_json(root.local(PLAN_FILE), limit=PLAN_LIMIT)  # `status` imports no pathlib
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == _VERSION else None


def applied_role(root: NodeRoot) -> str | None:
    """The role the recorded plan was applied (or rendered) with, or None: what runs, where
    the role file may already name the next one (``enable``)."""
    data = _recorded(root)
    role = data.get("role") if data is not None else None
    return role if isinstance(role, str) else None


def recorded_backend(root: NodeRoot) -> str | None:
    """The backend the recorded plan was applied (or rendered) with, or None."""
    data = _recorded(root)
    backend = data.get("backend") if data is not None else None
    return backend if isinstance(backend, str) else None


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
    previous = _recorded(root)
    if previous is None or previous.get("role") != data["role"]:
        return dict(data)
    try:
        have = {item["name"] for item in data["services"]}
        kept = [
            item
            for item in previous["services"]
            if item["name"] not in have and (item["origin"] in origins or item["name"] in names)
        ]
    except Exception:  # nothing usable recorded: nothing to keep
        return dict(data)
    if not kept:
        return dict(data)
    # Appended after the planned ones: not in start order any more (read_plan plans them again).
    return {**data, "services": [*data["services"], *kept], "in_order": False}


def left_out(
    root: NodeRoot,
    planned: Iterable[str],
    backend: str,
    *,
    origins: Iterable[str] = (),
    names: Iterable[str] = (),
) -> list[str] | None:
    """The services with a process that the recorded plan (of any role, under ``backend``)
    has and ``planned`` lacks, last started first: what the last apply started that the plan
    about to be applied no longer has (the role changed, a plugin no longer defines them).
    Those of ``origins`` (plugins that failed to load) or called one of ``names`` are not
    listed: :func:`keeping` keeps them recorded. None when nothing usable is recorded under
    ``backend`` (none, damaged, of another version or another backend)."""
    items = _left_out_items(root, planned, backend, origins=origins, names=names)
    if items is None:
        return None
    try:
        return [item["name"] for item in items if item["command"] is not None]
    except (TypeError, KeyError):  # a record of another shape: nothing known to stop
        return None


def left_out_services(
    root: NodeRoot,
    planned: Iterable[str],
    backend: str,
    *,
    origins: Iterable[str] = (),
    names: Iterable[str] = (),
) -> list[Service]:
    """As :func:`left_out`, but every such service, milestones (no command) too, as recorded:
    what an init-system backend rendered files for that must go (the next boot would start
    them). Empty when nothing usable is recorded under ``backend``."""
    items = _left_out_items(root, planned, backend, origins=origins, names=names)
    try:
        return [_service(item) for item in items or ()]
    except Exception:  # a record of another shape, or one that no longer validates: none known
        return []


def _left_out_items(
    root: NodeRoot,
    planned: Iterable[str],
    backend: str,
    *,
    origins: Iterable[str],
    names: Iterable[str],
) -> list[dict[str, Any]] | None:
    """The recorded services (as recorded) :func:`left_out` reads, last started first."""
    data = _recorded(root)
    if data is None or data.get("backend") != backend:
        return None
    try:
        kept, skip = set(origins), {*planned, *names}
        found = [
            item
            for item in data["services"]
            if isinstance(item["name"], str)
            and item["name"] not in skip
            and item["origin"] not in kept
        ]
    except (TypeError, KeyError):  # a record of another shape: nothing known to stop
        return None
    return found[::-1]


def write_plan(root: NodeRoot, data: Mapping[str, Any]) -> bool:
    """Record ``data`` (from :func:`plan_data`) unless it is already recorded; True if written."""
    from noderole.reading import loads_json
    from noderole.state import write_state_file

    try:
        # Not through pathlib: an apply imports none. A FIFO or a device there is replaced.
        held: bytes | None = read_regular(root.local(PLAN_FILE), limit=PLAN_LIMIT)
    except OSError:
        held = None
    if held is not None:
        # Compared as data: parsing is C, the indented text is written by Python's own encoder
        # (every re-apply, which changes nothing, paid for it).
        try:
            if loads_json(held) == data:
                return False
        except ValueError:
            pass
    text = jsontext.dumps(data, indent=1, sort_keys=True).encode()
    if held == text:
        return False
    write_state_file(root, PLAN_FILE, text)
    return True


def _service(data: Mapping[str, Any]) -> Service:
    from noderole.records import WAIT_TYPES, Secret, Service, Supervision

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
        text = read_regular(root.local(PLAN_FILE), limit=PLAN_LIMIT).decode()
    except (OSError, ValueError):  # a FIFO, a device, too large, not UTF-8: nothing recorded
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
        data = jsontext.loads(text)
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


def read_view(root: NodeRoot, role: str | None) -> RecordedView | None:
    """The recorded plan of ``role`` (None: of any role) as ``status`` reads it, without
    building a record or planning: None unless plan.json is of this version and role, lists
    its services in start
    order (see :func:`plan_data`) and has the shape :func:`plan_data` writes. The caller then
    reads it with :func:`read_plan`, which says whether it is usable at all."""
    data = _recorded(root)
    try:
        if (
            data is None
            or not isinstance(data.get("role"), str)
            or (role is not None and data["role"] != role)
            or data.get("in_order") is not True
            or not isinstance(data.get("backend"), str)
            or not isinstance(data.get("noderole_path"), str)
            or not isinstance(data.get("services"), list)
        ):
            return None
        services = [_view_service(item) for item in data["services"]]
    except (TypeError, KeyError):
        return None
    if None in services or len({s.name for s in services if s}) != len(services):
        return None
    return RecordedView(
        role=data["role"],
        services=[s for s in services if s is not None],
        backend=data["backend"],
        noderole_path=data["noderole_path"],
    )


def _view_service(item: Any) -> RecordedService | None:
    """A recorded service of the shape :func:`_service_data` writes, else None."""
    if not isinstance(item, dict):
        return None
    name, command, readiness = item["name"], item["command"], item["readiness"]
    logs = (item["output_log"], item["error_log"])
    secret_keys = item.get("secret_keys", [])
    if (
        not isinstance(name, str)
        or not (command is None or (_strings(command) and command))
        or not all(log is None or isinstance(log, str) for log in logs)
        or not (readiness is None or isinstance(readiness, dict))
        or not _strings(secret_keys)
    ):
        return None
    return RecordedService(
        name=name,
        command=None if command is None else tuple(command),
        output_log=logs[0],
        error_log=logs[1],
        readiness=readiness,
        secret_keys=secret_keys,
    )


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)
