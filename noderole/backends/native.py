"""The native backend: services run under noderole's own supervisor daemon.

Works on any machine, in a container and under ``--root`` (where it is always the backend). This
module turns a :class:`~noderole.records.Service` into the supervisor's
:class:`~noderole.supervisor.ProcessSpec` (the supervisor knows nothing of records or attrs):
node paths resolved under the root, a clean environment (never the caller's shell environment,
so a token exported in an operator's shell cannot leak into a daemon), secrets revealed only
here. The supervisor's own log is ``ROOT/var/log/noderole/supervisor.log``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from noderole.errors import BackendError
from noderole.paths import RUN_DIR
from noderole.root import NodeRoot
from noderole.supervisor import NotAnswering, ServiceStatus, Supervisor, SupervisorError

if TYPE_CHECKING:
    from noderole.records import Service, Supervision
    from noderole.supervisor import ProcessSpec, SupervisionSpec

__all__ = ["BASE_ENVIRONMENT", "IN_FLIGHT", "LOG_PATH", "NativeBackend", "process_spec"]

IN_FLIGHT = 64
"""Start requests one apply keeps in flight to the daemon at once.

The engine runs independent services in threads of their own; the daemon answers starts in
batches (once a state write covers them), so a batch is at most this many; more in flight would
only deepen its listen queue (and, past its backlog, a connection fails with EAGAIN, which the
client retries).
"""


BASE_ENVIRONMENT = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
"""What every child starts with, before the service's own environment (as an init system would)."""

LOG_PATH = "/var/log/noderole/supervisor.log"
"""The supervisor's own log (a node path): on disk, so it survives a reboot."""


def supervision_spec(supervision: Supervision) -> SupervisionSpec:
    """The supervisor's form of ``supervision``."""
    from noderole import recordclass
    from noderole.supervisor import SupervisionSpec

    settings = recordclass.asdict(supervision)
    # systemd's alone: this supervisor makes no control group of a service's, to hand over or
    # to limit, and sets no $NOTIFY_SOCKET (the service's readiness check says when it is up).
    del settings["delegate"], settings["tasks"], settings["notify"]
    return SupervisionSpec(**settings)


def process_spec(service: Service, *, root: NodeRoot, fingerprint: str) -> ProcessSpec:
    """The supervisor's view of ``service`` under ``root``."""
    # Imported here: `status` and `stop` use this backend without records, attrs or probes.
    from noderole.supervisor import ProcessSpec, ReadinessSpec
    from noderole.waits import probe_for

    if service.command is None:
        raise ValueError(f"service {service.name!r} has no command")

    def local(path: str | None) -> str | None:
        return None if path is None else root.local(path)

    environment = {**BASE_ENVIRONMENT, **root.environment(), **service.revealed_environment()}
    readiness = None
    if service.readiness is not None:
        readiness = ReadinessSpec(
            probe=probe_for(service.readiness, root), timeout=float(service.readiness.timeout)
        )
    return ProcessSpec(
        name=service.name,
        argv=(root.local(service.command[0]), *service.command[1:]),
        environment=environment,
        user=service.user,
        group=service.group,
        cwd=local(service.working_directory) or root.local("/"),
        pidfile=local(service.pidfile),
        stdout_log=local(service.output_log),
        stderr_log=local(service.error_log),
        supervision=supervision_spec(service.supervision),
        readiness=readiness,
        fingerprint=fingerprint,
    )


@contextmanager
def _as_backend_error() -> Iterator[None]:
    try:
        yield
    except SupervisorError as e:
        raise BackendError(str(e)) from e


class NativeBackend:
    """Start, query and stop services through the node's supervisor daemon."""

    name = "native"

    def __init__(
        self,
        root: NodeRoot,
        *,
        warn: Callable[[str], None] | None = None,
        owner: int | None = None,
    ) -> None:
        """``owner``: a daemon this backend starts ends with that process (see
        :class:`~noderole.supervisor.Supervisor`): a rehearsal's own pid."""
        self.root = root
        self.supervisor = Supervisor(
            root.local(RUN_DIR), log_path=root.local(LOG_PATH), warn=warn, owner=owner
        )
        self._in_flight = threading.BoundedSemaphore(IN_FLIGHT)
        self.hello: float | None = None
        """Seconds a status waits for the daemon's hello before it is taken as not answering
        (None: the status default, 1 s). ``status --wait``, which decides on the answer, waits
        as long as a start or a stop does."""

    def prepare(self) -> None:
        """Start the daemon's interpreter now, unless one runs: the first start then only tells
        it to go (:meth:`~noderole.supervisor.Supervisor.prepare`)."""
        self.supervisor.prepare()

    def discard(self) -> None:
        """End the standby :meth:`prepare` started, if no start needed a daemon."""
        self.supervisor.discard()

    def status(self, names: Sequence[str] | None = None) -> Mapping[str, ServiceStatus]:
        """Current status of the named services (all known ones when ``names`` is None).

        A daemon that does not answer: the recorded statuses, each process looked up in /proc,
        and :attr:`unsupervised` says so."""
        listed = list(names) if names else None
        with _as_backend_error():
            if self.hello is None:
                statuses = self.supervisor.status(listed)
            else:
                statuses = self.supervisor.status(listed, hello=self.hello)
            return {s.name: s for s in statuses}

    def status_to_act_on(self, names: Sequence[str]) -> Mapping[str, ServiceStatus]:
        """:meth:`status`, for ``apply``, which acts on it: a daemon that does not answer
        within a start's hello timeout fails it (BackendError, naming the daemon's pid and the
        fix) instead of an answer from the state file, which would have ``apply`` leave a
        service it records as running to a daemon that respawns nothing."""
        from noderole.supervisor._protocol import HELLO_TIMEOUT

        with _as_backend_error():
            statuses = self.supervisor.status(list(names), hello=HELLO_TIMEOUT, strict=True)
            return {s.name: s for s in statuses}

    @property
    def unsupervised(self) -> str | None:
        """Who is not answering, when the last status found the daemon stopped or hung (so
        nothing is supervised); None otherwise."""
        return self.supervisor.hung

    @property
    def killed_leftovers(self) -> Mapping[str, list[int]]:
        """What the last :meth:`stop` ended of a killed daemon's services (name -> pids): they
        had survived it, its watchdog killed with it."""
        return self.supervisor.killed_leftovers

    def start(self, service: Service, *, fingerprint: str) -> ServiceStatus:
        """Start or replace the service's process; the daemon is started on first use.

        At most :data:`IN_FLIGHT` starts talk to the daemon at once; once the daemon was found
        not answering, every later start of this backend fails at once with the same reason.
        """
        spec = process_spec(service, root=self.root, fingerprint=fingerprint)
        with self._in_flight, _as_backend_error():
            hung = self.supervisor.not_answering
            if hung is not None:
                raise BackendError(hung)
            try:
                return self.supervisor.start(spec)
            except NotAnswering as e:
                self.supervisor.not_answering = str(e)
                raise

    def stop(
        self, names: Sequence[str], *, waves: Sequence[Sequence[str]] | None = None
    ) -> list[ServiceStatus]:
        """Stop in the given order (with ``waves``, each group of services that depend on none
        of each other together); returns when every process is gone."""
        with _as_backend_error():
            return self.supervisor.stop(list(names), waves=waves)
