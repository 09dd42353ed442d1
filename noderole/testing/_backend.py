"""A process launcher that records instead of starting: the exact argv and environment, no process.

:class:`RecordingBackend` implements the engine's ``Backend`` protocol. It turns each service into
the supervisor's :class:`~noderole.supervisor.ProcessSpec` with the native backend's own
:func:`~noderole.backends.native.process_spec`, so what it records is byte for byte what the
native supervisor would be handed.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from noderole.backends.native import process_spec
from noderole.clock import Clock
from noderole.engine import ApplyReport
from noderole.errors import BackendError
from noderole.operations import Operations
from noderole.plan import Plan
from noderole.records import Service
from noderole.supervisor import ProcessSpec, ServiceState, ServiceStatus
from noderole.testing._prestart import new_fake_clock
from noderole.testing._root import RootLike, as_node_root

__all__ = ["RecordingBackend", "apply_recorded"]


class RecordingBackend:
    """Records every start and stop; starts nothing.

    ``fail`` maps service names to a reason: starting one raises
    :class:`~noderole.errors.BackendError` with it, as a refusing init system would. Started
    services report ``ready`` until stopped, which satisfies their dependents as a supervisor's
    passed readiness check does (``ready=False``: ``running``, and the apply runs the service's
    readiness check itself, under the root). Thread-safe: the engine
    starts independent services from several threads.
    """

    name = "recording"

    def __init__(
        self, node_root: RootLike, *, fail: Mapping[str, str] | None = None, ready: bool = True
    ) -> None:
        self.root = as_node_root(node_root)
        """The node root specs are resolved under (as the native backend would)."""
        self.fail = dict(fail or {})
        """Service name -> reason its start is refused."""
        self.ready = ready
        """Whether started services report ``ready`` rather than ``running``."""
        self.started: list[ProcessSpec] = []
        """Every start, in order (a restart appears again)."""
        self.stopped: list[str] = []
        """Every stop, in order."""
        self._lock = threading.Lock()
        self._running: dict[str, ServiceStatus] = {}

    def status(self, names: Sequence[str] | None = None) -> Mapping[str, ServiceStatus]:
        """The recorded state of the named services (all started ones when ``names`` is None)."""
        with self._lock:
            wanted = self._running if names is None else names
            return {n: self._running[n] for n in wanted if n in self._running}

    def start(self, service: Service, *, fingerprint: str) -> ServiceStatus:
        """Record the :class:`ProcessSpec` the native supervisor would get; start nothing."""
        spec = process_spec(service, root=self.root, fingerprint=fingerprint)
        reason = self.fail.get(service.name)
        if reason is not None:
            raise BackendError(reason)
        state: ServiceState = "ready" if self.ready else "running"
        status = ServiceStatus(name=service.name, state=state, fingerprint=fingerprint)
        with self._lock:
            self.started.append(spec)
            self._running[service.name] = status
        return status

    def stop(self, names: Sequence[str]) -> list[ServiceStatus]:
        """Record the stops, in order."""
        with self._lock:
            self.stopped.extend(names)
            for name in names:
                self._running.pop(name, None)
        return [ServiceStatus(name=name, state="stopped") for name in names]

    # ---------------------------------------------------------------- for assertions

    def names(self) -> list[str]:
        """Names of the started services, in start order (a restart appears again)."""
        with self._lock:
            return [spec.name for spec in self.started]

    def spec(self, name: str) -> ProcessSpec:
        """The last :class:`ProcessSpec` recorded for ``name``; AssertionError if never started."""
        with self._lock:
            for spec in reversed(self.started):
                if spec.name == name:
                    return spec
            started = ", ".join(s.name for s in self.started) or "nothing"
        raise AssertionError(f"{name} was not started (started: {started})")

    def argv(self, name: str) -> list[str]:
        """The exact argv ``name`` would be started with (``argv[0]`` resolved under the root)."""
        return list(self.spec(name).argv)

    def node_argv(self, name: str) -> list[str]:
        """The argv as the booted node sees it: ``argv[0]`` as a node path."""
        argv = self.argv(name)
        return [self.root.to_node(argv[0]), *argv[1:]]

    def environment(self, name: str) -> dict[str, str]:
        """The child's whole environment (secrets revealed), exactly."""
        return dict(self.spec(name).environment)


def apply_recorded(
    plan: Plan,
    node_root: RootLike,
    *,
    clock: Clock | None = None,
    backend: RecordingBackend | None = None,
    readiness_timeout: float = 60.0,
) -> tuple[ApplyReport, RecordingBackend]:
    """Apply ``plan`` in-process with a :class:`RecordingBackend`, as ``noderole apply`` would:
    pre-start steps run for real under ``node_root`` (on a fake clock by default), the role and
    definition digests are recorded under it, no process starts."""
    root = as_node_root(node_root)
    recorder = backend if backend is not None else RecordingBackend(root)
    operations = Operations(
        root=root, clock=clock if clock is not None else new_fake_clock(), autoload=False
    )
    report = operations.apply(
        plan, recorder, readiness_timeout=readiness_timeout, progress_every=0.0, publish=False
    )
    return report, recorder
