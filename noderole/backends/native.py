"""The native backend: services run under noderole's own supervisor daemon.

Works on any machine, in a container and under ``--root`` (where it is always the backend). This
module turns a :class:`~noderole.records.Service` into the supervisor's
:class:`~noderole.supervisor.ProcessSpec`: node paths resolved under the root, a clean
environment (never the caller's shell environment, so a token exported in an operator's shell
cannot leak into a daemon), secrets revealed only here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from noderole.records import Service
from noderole.root import NodeRoot
from noderole.state import RUN_DIR
from noderole.supervisor import ProcessSpec, ServiceStatus, Supervisor, readiness_check

__all__ = ["BASE_ENVIRONMENT", "NativeBackend", "process_spec"]

BASE_ENVIRONMENT = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
"""What every child starts with, before the service's own environment (as an init system would)."""


def process_spec(service: Service, *, root: NodeRoot, fingerprint: str) -> ProcessSpec:
    """The supervisor's view of ``service`` under ``root``."""
    if service.command is None:
        raise ValueError(f"service {service.name!r} has no command")

    def local(path: str | None) -> str | None:
        return None if path is None else str(root.resolve(path))

    environment = {**BASE_ENVIRONMENT, **root.environment(), **service.revealed_environment()}
    return ProcessSpec(
        name=service.name,
        argv=(str(root.resolve(service.command[0])), *service.command[1:]),
        environment=environment,
        user=service.user,
        group=service.group,
        cwd=local(service.working_directory) or str(root.resolve("/")),
        pidfile=local(service.pidfile),
        stdout_log=local(service.output_log),
        stderr_log=local(service.error_log),
        supervision=service.supervision,
        readiness=(
            None
            if service.readiness is None
            else readiness_check(service.readiness, lambda p: str(root.resolve(p)))
        ),
        fingerprint=fingerprint,
    )


class NativeBackend:
    """Start, query and stop services through the node's supervisor daemon."""

    name = "native"

    def __init__(self, root: NodeRoot) -> None:
        self.root = root
        self.supervisor = Supervisor(root.resolve(RUN_DIR))

    def status(self, names: Sequence[str] | None = None) -> Mapping[str, ServiceStatus]:
        """Current status of the named services (all known ones when ``names`` is None)."""
        return {s.name: s for s in self.supervisor.status(list(names) if names else None)}

    def start(self, service: Service, *, fingerprint: str) -> ServiceStatus:
        """Start or replace the service's process; the daemon is started on first use."""
        self.supervisor.ensure_running()
        return self.supervisor.start(process_spec(service, root=self.root, fingerprint=fingerprint))

    def stop(self, names: Sequence[str]) -> list[ServiceStatus]:
        """Stop in the given order; returns when every process is gone."""
        return self.supervisor.stop(list(names))
