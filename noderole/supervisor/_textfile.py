"""``noderole.prom`` kept current by the daemon: the service families after every state change,
and its heartbeat at least once a minute.

The CLI writes the file after apply, renew, stop and restart, but a respawn after a kill -9, or
the supervisor giving up on a crash-looping service, happens with no CLI around. Under the native
backend the CLI therefore hands the daemon, with the ``textfile`` request, the file's path, the
role, the role's service names and the text of the role-level families (the last apply, the
certificates' expiry: only the CLI knows them). From then on the daemon is the file's writer: the
request is answered once the file is written, and every later state change rewrites it.

- Coalesced: at most one write per :data:`WRITE_GAP` seconds, the last state always written (a
  change inside the gap arms one timer for its end). 200 services crash-looping every 0.1 s make
  one write a second, not 2,000.
- Safe: written through :func:`._safeopen.replace_file` (a random ``O_EXCL|O_NOFOLLOW``
  temporary renamed over the file, the directory resolved without untrusted links), so root never
  writes through a link a user planted; the directory is never created.
- Never fatal: a full disk or a missing directory is logged once (and its recovery once), the
  services carry on, and the write is tried again every :data:`WRITE_GAP` seconds until it
  succeeds.
- Alive: every write ends with ``noderole_supervisor_heartbeat_timestamp_seconds`` (the wall
  clock), and the file is rewritten with nothing changed once :data:`HEARTBEAT` seconds have
  passed since the last write that succeeded. Without it a daemon frozen (SIGSTOP, hung) or
  SIGKILLed with its watchdog left a file saying every service was up, for good: the fleet never
  learnt that nothing was supervised. Its last write as it exits (:meth:`Textfile.close`) has
  no heartbeat: a node stopped on purpose is not a silent supervisor.

Standard library only (the daemon imports it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from noderole.supervisor import _safeopen
from noderole.supervisor._status import ServiceStatus
from noderole.supervisor.exposition import (
    HEARTBEAT,
    Exposition,
    heartbeat_family,
    service_families,
)

TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "HEAD_LIMIT",
    "HEARTBEAT",
    "WRITE_GAP",
    "Target",
    "Textfile",
    "render",
    "target_from_wire",
]

WRITE_GAP = 1.0
"""Seconds between two writes of the file, at least."""
HEAD_LIMIT = 1 << 20
"""Characters of role-level families a request may carry."""


class Target:
    """Where and what to write (the ``textfile`` request, decoded)."""

    __slots__ = ("head", "names", "path", "role")

    def __init__(self, *, path: str, role: str, names: Sequence[str], head: str) -> None:
        self.path = path
        """The file (a local path: resolved under ``--root`` by the CLI)."""
        self.role = role
        """The role, for ``noderole_service_up{role}``."""
        self.names = tuple(names)
        """The role's services, in the order ``status`` lists them."""
        self.head = head
        """The role-level families' text, written first."""


def target_from_wire(request: dict[str, Any]) -> Target:
    """Decode a ``textfile`` request; ValueError names the bad field."""
    path, role, names, head = (request.get(k) for k in ("path", "role", "names", "head"))
    if not isinstance(path, str) or not path.startswith("/") or path.endswith("/"):
        raise ValueError(f"textfile: path must be an absolute file path, got {path!r}")
    if not isinstance(role, str) or not role:
        raise ValueError(f"textfile: role must be a non-empty string, got {role!r}")
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ValueError("textfile: names must be a list of service names")
    if not isinstance(head, str) or len(head) > HEAD_LIMIT:
        raise ValueError(f"textfile: head must be a string of at most {HEAD_LIMIT} characters")
    if head and not head.endswith("\n"):
        raise ValueError("textfile: head must end with a newline")
    return Target(path=path, role=role, names=names, head=head)


def render(
    target: Target, statuses: Sequence[ServiceStatus], heartbeat: float | None = None
) -> str:
    """The whole file: the role-level families, the service families, then the heartbeat
    (``heartbeat``: unix time; None: none, as in the last write)."""
    out = Exposition()
    service_families(
        out, role=target.role, services=((s.name, s.state, s.restarts) for s in statuses)
    )
    if heartbeat is not None:
        heartbeat_family(out, role=target.role, timestamp=heartbeat)
    return target.head + out.text()


class Textfile:
    """The daemon's writer of ``noderole.prom`` (nothing happens until :meth:`configure`)."""

    def __init__(
        self,
        statuses: Callable[[Sequence[str]], list[ServiceStatus]],
        call_later: Callable[[float, Callable[[], None]], object],
        log: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._statuses = statuses
        self._call_later = call_later
        self._log = log
        self._clock = clock
        """Monotonic: the gap between writes, the heartbeat's interval."""
        self._wall = wall
        """The heartbeat's value (unix time)."""
        self.target: Target | None = None
        self.dirty = False
        self.next_write = 0.0
        self.written_at = 0.0
        """The clock when the last write that succeeded began."""
        self.closing = False
        """The last write (:meth:`close`): no heartbeat."""
        self.timer_armed = False
        self.writes = 0
        """Files written (diagnostics, and the coalescing test)."""
        self.last_error = ""

    def configure(self, target: Target) -> None:
        """Write for ``target`` from now on, starting with a write at once."""
        self.target = target
        self.dirty = True
        self.flush(force=True)

    def changed(self) -> None:
        """A service's state changed: the next :meth:`flush` due writes it."""
        if self.target is not None:
            self.dirty = True

    def close(self) -> None:
        """The daemon exits: write the last state (all stopped) without the heartbeat, even when
        nothing changed, so that a heartbeat written earlier leaves the file (a node stopped on
        purpose must not look like a silent supervisor)."""
        if self.target is None:
            return
        self.closing = True
        self.dirty = True
        self.flush(force=True)

    def flush(self, *, force: bool = False) -> None:
        """Write if something changed and the gap since the last write has passed, or if
        :data:`HEARTBEAT` seconds have passed since the last write that succeeded; otherwise arm
        one timer for the gap's end (the daemon's loop calls flush again when it fires, and at
        least once a second: the heartbeat needs no timer)."""
        if self.target is None:
            return
        now = self._clock()
        if not self.dirty:
            if now < self.written_at + HEARTBEAT:
                return
            self.dirty = True  # nothing changed: the heartbeat tells the fleet the daemon lives
        if not force and now < self.next_write:
            if not self.timer_armed:
                self.timer_armed = True
                self._call_later(self.next_write - now, self._due)
            return
        self.dirty = False
        self.next_write = now + WRITE_GAP
        target = self.target
        heartbeat = None if self.closing else self._wall()
        text = render(target, self._statuses(target.names), heartbeat)
        try:
            _safeopen.replace_file(target.path, text.encode(), mode=0o644, create_dirs=False)
        except OSError as e:
            # Not str(e): it names the random temporary, and each retry would be a new message.
            why = e.strerror if e.strerror and e.filename is not None else str(e)
            message = f"cannot write the fleet metrics {target.path}: {why}"
            if message != self.last_error:
                self._log(f"{message} (the services carry on; retried every {WRITE_GAP:g}s)")
                self.last_error = message
            self.dirty = True  # the last state is still owed: try again after the gap
            self.flush()
            return
        self.writes += 1
        self.written_at = now
        if self.last_error:
            self._log(f"fleet metrics {target.path} written again")
            self.last_error = ""

    def _due(self) -> None:
        self.timer_armed = False
        self.flush()
