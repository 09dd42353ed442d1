"""The state file: what the daemon supervises, readable after the daemon is gone.

``run_dir/state.json`` is rewritten atomically (temp file + rename) on every change::

    {"version": 1, "boot_id": "...",
     "supervisor": {"pid": 123, "start_ticks": 456},
     "services": {"NAME": <ServiceStatus.to_wire()>, ...}}

It never holds a service's environment (secrets stay in memory). Two readers use it: the client,
to answer ``status`` when no daemon runs, and a new daemon, to kill what a SIGKILLed predecessor
left behind (:func:`kill_leftovers`) before it starts anything, so a restart never runs a
duplicate next to an orphan.

A file that is not valid JSON, or valid JSON of the wrong shape (a service that is not an object,
``"restarts": "lots"``, ``NaN``, a pid of 10**30), is corrupt: :func:`load_state` moves it aside
as ``state.json.corrupt-<UTC time>``, warns once, and answers an empty state.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Iterable

from noderole.supervisor import _jsontext as jsontext
from noderole.supervisor import _proc, _safeopen
from noderole.supervisor._record import field, record
from noderole.supervisor._status import SchemaError, ServiceStatus

__all__ = [
    "STATE_VERSION",
    "Encoded",
    "State",
    "encode_state",
    "kill_leftovers",
    "leftover_groups",
    "load_state",
    "parse_state",
    "write_state",
]

STATE_VERSION = 1


@record(frozen=False, kw_only=False)
class State:
    """The decoded state file."""

    services: dict[str, ServiceStatus] = field(default_factory=dict)
    supervisor_pid: int | None = None
    """The daemon that wrote it (None: none recorded, or another boot)."""
    supervisor_ticks: int | None = None


def _no_constant(name: str) -> object:
    raise SchemaError(f"{name} is not a number a state file may hold")


def parse_state(raw: bytes) -> State:
    """The state from the file's bytes; SchemaError if it is not a state file of this version.

    Pids recorded in an earlier boot name nothing in this one: they are dropped.
    """
    try:
        data = jsontext.loads(raw, parse_constant=_no_constant)
    except SchemaError:
        raise
    except ValueError as e:  # not JSON, not UTF-8, an integer too long to convert
        raise SchemaError(f"not JSON: {e}") from None
    except RecursionError:
        raise SchemaError("nested too deeply") from None
    if not isinstance(data, dict):
        raise SchemaError(f"expected an object, got {type(data).__name__}")
    if data.get("version") != STATE_VERSION:
        raise SchemaError(f"version must be {STATE_VERSION}, got {data.get('version')!r}")
    services = data.get("services", {})
    if not isinstance(services, dict):
        raise SchemaError(f"services must be an object, got {type(services).__name__}")
    state = State(
        services={name: ServiceStatus.from_wire(rec, name=name) for name, rec in services.items()}
    )
    sup = data.get("supervisor")
    if sup is not None:
        pid, ticks = (sup.get("pid"), sup.get("start_ticks")) if isinstance(sup, dict) else (0, 0)
        if type(pid) is not int or type(ticks) is not int or not 1 < pid < 1 << 22 or ticks < 0:
            raise SchemaError(f"supervisor must be {{pid, start_ticks}}, got {sup!r}")
        state.supervisor_pid, state.supervisor_ticks = pid, ticks
    if data.get("boot_id") != _proc.boot_id():
        state.supervisor_pid = state.supervisor_ticks = None
        for name, status in state.services.items():
            state.services[name] = status.but(pid=None, start_ticks=None)
    return state


def _read_regular(path: str) -> bytes:
    """The state file's bytes: opened without waiting (a FIFO there has no writer) and read
    only when it is a regular file (a link to /dev/zero would never end)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_state(path: str, warn: Callable[[str], None]) -> State:
    """The state file's content: empty when it is missing; a corrupt file is moved aside.

    ``warn`` is told once, naming the file it was moved to (each corrupt file is moved once, so
    the next reader finds no file and says nothing).
    """
    try:
        raw = _read_regular(path)
    except FileNotFoundError:
        return State()
    except OSError as e:
        warn(f"cannot read {path}: {e}; going on without the recorded state")
        return State()
    try:
        return parse_state(raw)
    except SchemaError as e:
        aside = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        try:
            os.replace(path, aside)
        except FileNotFoundError:
            return State()  # another reader moved it aside first (and warned)
        except OSError as move_error:
            warn(f"{path} is corrupt ({e}) and could not be moved aside: {move_error}")
            return State()
        warn(f"{path} is corrupt ({e}): moved it to {aside} and went on without it")
        return State()


def _dumps(value: object) -> str:
    return jsontext.dumps(value, separators=(",", ":"), allow_nan=False)


Encoded = dict[int, tuple[str, ServiceStatus, str]]
"""What :func:`encode_state` keeps between calls: by the identity of a status object, the
service's name, the status (holding the identity), and their JSON member ``"name":{...}``."""


def encode_state(state: State, encoded: Encoded | None = None) -> bytes:
    """The state file's bytes.

    ``encoded`` keeps each service's JSON between calls, by the identity of its status object
    (statuses are frozen): the daemon rewrites the file after every batch of changes and hands
    an unchanged service's status as the same object, so a write encodes only what changed (a
    crash-looping node changes a service or two a batch; at 200 services, encoding every one
    again and hashing every status to find it was a third of the daemon's time). Only this
    state's statuses are kept in it afterwards.
    """
    head = _dumps(
        {
            "version": STATE_VERSION,
            "boot_id": _proc.boot_id(),
            "supervisor": None
            if state.supervisor_pid is None
            else {"pid": state.supervisor_pid, "start_ticks": state.supervisor_ticks},
        }
    )
    known: Encoded = encoded if encoded is not None else {}
    fresh: Encoded = {}
    parts = []
    for name, status in state.services.items():
        entry = known.get(id(status))
        if entry is None or entry[0] != name or entry[1] is not status:
            entry = (name, status, f"{_dumps(name)}:{_dumps(status.to_wire())}")
        fresh[id(status)] = entry
        parts.append(entry[2])
    if encoded is not None:
        encoded.clear()
        encoded.update(fresh)
    # The same bytes as one json.dumps of the whole document, "services" last.
    return f'{head[:-1]},"services":{{{",".join(parts)}}}}}'.encode()


def write_state(path: str, state: State, encoded: Encoded | None = None) -> None:
    """Replace the state file atomically (a reader sees the old or the new file, never half).

    ``encoded``: see :func:`encode_state`.
    """
    raw = encode_state(state, encoded)
    # A random O_EXCL temporary, renamed over the file: nothing planted can redirect the write.
    _safeopen.replace_file(path, raw, mode=0o600, create_dirs=False)


_WITH_PROCESS = frozenset(("starting", "running", "ready"))
"""States of a service whose process the daemon had not seen exit."""


def _leftovers(
    state: State, names: Iterable[str] | None = None
) -> dict[str, tuple[int, list[_proc.ProcStat]]]:
    """The recorded sessions (of ``names``, or every service) with running processes: name ->
    (sid, processes), from one listing of /proc."""
    candidates: dict[str, tuple[int, int, _proc.ProcStat | None]] = {}
    for name in state.services if names is None else names:
        status = state.services[name]
        sid, ticks = status.pid, status.start_ticks
        if sid is None or ticks is None or sid <= 1 or status.state not in _WITH_PROCESS:
            continue
        leader = _proc.proc_stat(sid)
        if leader is not None and leader.start_ticks != ticks:
            continue
        candidates[name] = (sid, ticks, leader)
    if not candidates:
        return {}
    members = _proc.list_sessions({sid for sid, _, _ in candidates.values()})[1]
    found: dict[str, tuple[int, list[_proc.ProcStat]]] = {}
    for name, (sid, ticks, leader) in candidates.items():
        running = [st for st in members[sid] if st.start_ticks >= ticks]
        if leader is not None and leader.running and leader.session == sid:
            running.insert(0, leader)
        if running:
            found[name] = (sid, running)
    return found


def leftover_groups(state: State) -> dict[str, tuple[int, list[int]]]:
    """Recorded sessions that still have running processes: name -> (sid, pids).

    A service's process led a session of its own (its pid is the session's id, and its process
    group's); what it started is in that session, whatever group it moved to, unless it called
    setsid. A session counts as ours only if its leader is the recorded process (same start
    ticks) or, the leader being dead, its members started no earlier than the leader did. A live
    process with the session's number but another start time means the number was reused: not
    ours, left alone. A service recorded without a process (waiting to respawn, crashed,
    stopped) has nothing left: the daemon ended its session when the process exited, and the
    number it names may since lead another program's group.
    """
    return {
        name: (sid, sorted(st.pid for st in running))
        for name, (sid, running) in _leftovers(state).items()
    }


def kill_leftovers(state: State, timeout: float = 5.0) -> dict[str, list[int]]:
    """SIGKILL every process of every recorded session that still runs, and wait for them;
    name -> pids killed.

    Each process group of a session is signalled, then the sessions are looked at again (and
    what is left signalled again) until none is left or ``timeout`` passes. Blocking and
    bounded: called by a daemon before it serves, by its watchdog, or by a client with no
    daemon.
    """
    import signal  # here: a client that finds its daemon (`status`) kills nothing

    found = _leftovers(state)
    deadline = time.monotonic() + timeout
    left = found
    while left:
        for _, running in left.values():
            _proc.signal_groups(running, signal.SIGKILL)
        if time.monotonic() >= deadline:
            break
        time.sleep(0.01)
        left = _leftovers(state, list(left))
    return {name: sorted(st.pid for st in running) for name, (_, running) in found.items()}
