"""What the OpenRC and systemd backends share: render, enable and start through the machine's init.

``apply --backend openrc|systemd`` uses the same engine as the native backend: the engine runs the
pre-start steps and orders the services; the backend writes each service's runscript or unit
(:mod:`noderole.render`), enables it, and asks the init system to start it. The init system runs
``noderole hook NAME start-pre`` again as part of its own start; the steps are idempotent, so the
second run finds everything in place.

Idempotency: the fingerprint each service was started with is kept in
``/var/lib/noderole/init-fingerprints.json``; a service whose fingerprint did not change and that
the init system reports running is left alone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from noderole import recordclass
from noderole.errors import BackendError

if TYPE_CHECKING:
    from noderole.clock import Clock
    from noderole.records import Service, Wait
    from noderole.render import Rendered
    from noderole.root import NodeRoot

__all__ = ["FINGERPRINTS", "InitStatus", "InitSystemBackend"]

FINGERPRINTS = "/var/lib/noderole/init-fingerprints.json"


@recordclass.frozen(kw_only=True)
class InitStatus:
    """A service's state as the init system reports it."""

    name: str
    state: str
    pid: int | None = None
    fingerprint: str = ""
    reason: str = ""
    restarts: int = 0
    last_exit: str | None = None
    started_at: float | None = None


def failure(done: subprocess.CompletedProcess[str]) -> BackendError:
    """The error of an init-system tool that exited non-zero, naming the command and its words."""
    detail = (done.stderr or done.stdout).strip()
    return BackendError(f"{' '.join(done.args)} failed (exit {done.returncode}): {detail}")


class InitSystemBackend:
    """The part of a backend common to every init system; subclasses say how to talk to theirs."""

    name: str
    """The backend's name (``--backend``)."""
    tool: ClassVar[str]
    """The init system's command-line tool, which must be on PATH."""

    def __init__(
        self,
        root: NodeRoot,
        *,
        noderole_path: str,
        clock: Clock | None = None,
        readiness: Callable[[str], Wait | None] | None = None,
    ) -> None:
        if shutil.which(self.tool) is None:
            raise BackendError(
                f"backend {self.name} needs {self.tool}, which is not on PATH: is {self.name} the "
                "init system of this machine? Use --backend native otherwise"
            )
        self.root = root
        """The node root the rendered files and the fingerprints go under."""
        self.noderole_path = noderole_path
        """Where the rendered files find ``noderole`` on the booted machine."""
        from noderole.clock import SystemClock

        self.clock: Clock = clock or SystemClock()
        """Bounds the wait for a start to settle (fake in tests)."""
        self._readiness_of = readiness
        self._checks: dict[str, Wait | None] = {}
        self._remembering = threading.Lock()
        """The engine starts independent services in threads of their own: each read, add and
        write of the fingerprints file is one step, or one start's entry is lost and the next
        apply restarts that service for nothing."""

    # ---------------------------------------------------------------- what a subclass says

    def render(self, service: Service) -> list[Rendered]:
        """The files and links that define and enable ``service`` for this init system."""
        raise NotImplementedError

    def query(self, name: str) -> InitStatus:
        """The init system's state of ``name`` in the engine's words (``running`` at best: the
        base class turns it into ``ready`` when the readiness check passes), pid, restarts and
        start time where the init system knows them."""
        raise NotImplementedError

    def settled(self, name: str) -> InitStatus:
        """The state once the start asked of the init system has taken effect (bounded)."""
        return self.query(name)

    def record_milestone(self, service: Service) -> None:
        """Make a service without a command known to the init system (the engine ran its steps);
        nothing by default."""

    def launch(self, name: str, verb: str) -> None:
        """Ask the init system to ``start`` or ``restart`` ``name`` (rendered already)."""
        raise NotImplementedError

    def halt(self, name: str) -> None:
        """Ask the init system to stop ``name``; a service that is not running is no error."""
        raise NotImplementedError

    # ---------------------------------------------------------------- helpers

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run an init-system tool; with ``check``, a non-zero exit is a :class:`BackendError`."""
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=600)
        if check and done.returncode != 0:
            raise failure(done)
        return done

    def _fingerprints(self) -> dict[str, str]:
        try:
            data = json.loads(self.root.resolve(FINGERPRINTS).read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _remember(self, name: str, fingerprint: str) -> None:
        from noderole.atomic import write_atomic
        from noderole.manifest import record

        with self._remembering:
            data = {**self._fingerprints(), name: fingerprint}
            path = self.root.resolve(FINGERPRINTS)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode(), mode=0o644)
        record(self.root, "state", [FINGERPRINTS])

    # ---------------------------------------------------------------- Backend protocol

    def status(self, names: Sequence[str]) -> Mapping[str, InitStatus]:
        """Each service's state as the init system reports it, with its remembered fingerprint."""
        remembered = self._fingerprints()
        return {
            name: recordclass.evolve(
                self._with_readiness(self.query(name)), fingerprint=remembered.get(name, "")
            )
            for name in names
        }

    def _with_readiness(self, status: InitStatus) -> InitStatus:
        """``running`` becomes ``ready`` when the service's readiness check passes now."""
        if status.state != "running":
            return status
        if status.name not in self._checks and self._readiness_of is not None:
            self._checks[status.name] = self._readiness_of(status.name)
        check = self._checks.get(status.name)
        if check is None:
            return status
        from noderole.waits import missing

        return (
            status if missing(check, root=self.root) else recordclass.evolve(status, state="ready")
        )

    def start(self, service: Service, *, fingerprint: str) -> InitStatus:
        """Render, enable and start ``service``; restart it when it already runs."""
        from noderole.render import write_rendered

        self._checks[service.name] = service.readiness
        write_rendered(self.render(service), root=self.root)
        current = self.query(service.name)
        running = current.state in ("running", "ready", "starting")
        self.launch(service.name, "restart" if running else "start")
        status = self._with_readiness(self.settled(service.name))
        if status.state not in ("crashed", "stopped"):
            # Only a start that took is remembered: otherwise the next apply would find the
            # fingerprint and call a dead service "already running".
            self._remember(service.name, fingerprint)
        return recordclass.evolve(status, fingerprint=fingerprint)

    def stop(self, names: Sequence[str]) -> list[InitStatus]:
        """Stop in order through the init system."""
        for name in names:
            self.halt(name)
        return list(self.status(names).values())
