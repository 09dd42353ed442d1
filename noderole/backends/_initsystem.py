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

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from noderole import recordclass
from noderole.errors import BackendError
from noderole.reading import read_json

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
    started_monotonic: float | None = None
    """When the main process was forked, on ``time.monotonic()``'s clock (None: not known)."""
    queued: bool = False
    """A start job waits in the init system's queue (systemd: behind its ``After=`` units):
    ``starting``, and nothing has run yet."""


EXEC_BOUND = 10.0
"""Seconds a start waits for ``noderole exec`` to become the service's program (it resolves the
command first: an interpreter's start-up, tens of milliseconds)."""


_THERE, _ON_THE_WAY, _GONE = "there", "on the way", "gone"
_GONE_GRACE = 0.2
"""Seconds a main process may be gone while the init system still calls it running: it reaps
and records an exit at once; past this, the pid it reports is taken as it is."""


def _where(status: InitStatus, name: str, launched: tuple[float, float]) -> str:
    """Where the start asked at ``launched`` (wall clock, monotonic clock) is: ``there`` (the
    service's program runs, or the start has ended), ``on the way`` (its job is under way, the
    main process is still the init system's fork or ``noderole exec``, or what is read is from
    before the start), or ``gone`` (the main process reported is no longer there)."""
    if status.state == "starting":
        return _ON_THE_WAY
    if status.state == "running":
        # An init system that tells no pid (OpenRC) started it as far as can be told.
        return _THERE if status.pid is None else _process(status.pid, name)
    # Ended: by this start only if its main process was forked since. An init system that
    # keeps no such time has ended it, as far as can be told.
    if status.started_monotonic is not None and status.started_monotonic < launched[1]:
        return _ON_THE_WAY
    return _THERE


def _process(pid: int, name: str) -> str:
    """``there`` when process ``pid`` runs the service's own program (or /proc is not ours to
    read); ``on the way`` while it is the init system's fork before its exec (it runs PID 1's
    program), ``noderole exec [...] NAME``, or a zombie; ``gone`` when there is no such process,
    or it is exiting (no exe any more: the moment before it is a zombie)."""
    from noderole.supervisor._proc import proc_stat  # a start's, never status's, import

    found = proc_stat(pid)
    if found is None:
        return _GONE
    if not found.running:  # a zombie: it ended, and the init system will say so
        return _ON_THE_WAY
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            words = file.read().split(b"\0")
    except PermissionError:  # not ours to read: nothing to tell
        return _THERE
    except OSError:  # exiting (its memory, and so its exe, already gone) or no such process
        return _GONE
    with contextlib.suppress(OSError):
        if exe == os.readlink("/proc/1/exe"):
            return _ON_THE_WAY
    while words and not words[-1]:
        words.pop()
    wrapper = (
        len(words) >= 3
        and words[-1] == name.encode()
        and b"exec" in words
        and any(os.path.basename(w) in (b"noderole", b"__main__.py") for w in words)
    )
    return _ON_THE_WAY if wrapper else _THERE


def _last_words(root: NodeRoot, service: Service, *, since: float) -> str:
    """The last line of the service's log, when it was written since ``since``: where
    ``noderole exec`` says why it could not exec the program."""
    log = service.error_log or service.output_log
    if not log:
        return ""
    try:
        with open(root.local(log), "rb") as file:
            if os.fstat(file.fileno()).st_mtime < since:
                return ""
            file.seek(max(0, os.fstat(file.fileno()).st_size - 4096))
            lines = file.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return last.removeprefix("noderole: error: ")


def failure(done: subprocess.CompletedProcess[str]) -> BackendError:
    """The error of an init-system tool that exited non-zero, naming the command and its words."""
    # The tool's lines joined on one line: the console shows a newline in a message as an
    # escape (\x0a), in a progress line, the summary and status's "last apply" alike.
    lines = (line.strip() for line in (done.stderr or done.stdout).splitlines())
    detail = "; ".join(line for line in lines if line)
    return BackendError(f"{' '.join(done.args)} failed (exit {done.returncode}): {detail}")


class InitSystemBackend:
    """The part of a backend common to every init system; subclasses say how to talk to theirs."""

    name: str
    """The backend's name (``--backend``)."""
    tool: ClassVar[str]
    """The init system's command-line tool, which must be on PATH."""
    restarts_what_needs: ClassVar[bool] = True
    """Its restart of a service restarts what needs it (OpenRC's ``need``, systemd's
    ``Requires=``): the engine restarts no dependent itself (see ``_restarted_needs``)."""

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
        """Write the runscript or unit of a service without a command (the engine ran its
        steps), enabled as every service is.

        Dependents name it (k3s needs ``k3s-cluster``, which ``k3s-cluster-init`` provides):
        without its file the init system refuses their start (OpenRC: "needs non existent
        service", systemd: "not found"). Starting it is left to the init system, which starts
        it for them (OpenRC's ``need``, systemd's ``Requires=``), running its steps again.
        """
        from noderole.render import write_rendered

        changed = write_rendered(self.render(service), root=self.root)
        if changed:
            self.written()

    def retire(self, services: Sequence[Service]) -> list[str]:
        """Take ``services``, which an apply left out of the plan, off the init system: stop
        the milestones among them (their processes are stopped already: :meth:`stop`), then
        remove the files :meth:`start` and :meth:`record_milestone` wrote for them, runlevel
        and ``.wants`` links included, so the next boot does not start them. Only what still
        holds what noderole wrote is removed (:func:`~noderole.render.remove_rendered`).
        Returns the node paths removed."""
        from noderole.render import remove_rendered

        # systemd keeps a unit that is active while its file goes as "not-found active", and
        # refuses to load it again once it is written back.
        for name in self.milestones(services):
            self.halt(name)
        paths = {item.path for service in services for item in self.render(service)}
        removed = remove_rendered(paths, root=self.root)
        if removed:
            self.removed(removed)
        return removed

    def milestones(self, services: Iterable[Service]) -> list[str]:
        """The names of the services without a command among ``services`` that this init
        system holds as runscripts or units of noderole's (:meth:`record_milestone`), in the
        order given: what a ``reset`` or a stop of the whole role stops beside the processes
        (a milestone's unit stays active once its steps ran). Never one the init system
        provides itself (OpenRC's ``net``), which nothing of noderole's may stop."""
        found = []
        for service in services:
            if service.command is not None:
                continue
            try:
                if self.render(service):
                    found.append(service.name)
            except BackendError:  # it cannot be rendered: it never was
                continue
        return found

    def removed(self, paths: Sequence[str]) -> None:
        """Tell the init system that the files at ``paths`` (node paths) are gone; by default
        as :meth:`written`."""
        self.written()

    def written(self) -> None:
        """Tell the init system that rendered files changed; nothing by default."""

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
            data = read_json(self.root.resolve(FINGERPRINTS))
        except (OSError, ValueError):  # none, or a damaged one: nothing known
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
        if write_rendered(self.render(service), root=self.root):
            self.written()
        current = self.query(service.name)
        running = current.state in ("running", "ready", "starting", "backoff")
        launched = time.time(), time.monotonic()
        self.launch(service.name, "restart" if running else "start")
        status = self._with_readiness(
            self._past_exec(service, self.settled(service.name), launched)
        )
        if status.state not in ("crashed", "stopped"):
            # Only a start that took is remembered: otherwise the next apply would find the
            # fingerprint and call a dead service "already running".
            self._remember(service.name, fingerprint)
        return recordclass.evolve(status, fingerprint=fingerprint)

    def _past_exec(
        self, service: Service, status: InitStatus, launched: tuple[float, float]
    ) -> InitStatus:
        """The state once the service's main process is its own program, not ``noderole exec``
        on the way to it (bounded by :data:`EXEC_BOUND`).

        A unit runs the service through ``noderole exec NAME``, which resolves the command and
        only then execs it: the init system calls the service running from the fork on, and a
        program that cannot run (its ``#!`` interpreter missing, built for another machine)
        ended the wrapper a moment after the start was judged a success, to crash-loop after
        ``apply`` said it had started. Ended meanwhile, the start has failed, as the native
        supervisor reports it at once; the wrapper's last words, in the service's log, say why.
        """
        if service.command is None or status.queued:  # nothing has run yet: nothing to judge
            return status
        deadline = self.clock.monotonic() + EXEC_BOUND
        gone_since: float | None = None
        pause = 0.01  # thinning out: a look is a request to PID 1 under systemd (see settled)
        while (where := _where(status, service.name, launched)) != _THERE:
            now = self.clock.monotonic()
            if where == _GONE:
                gone_since = now if gone_since is None else gone_since
                if now - gone_since >= _GONE_GRACE:
                    break
            else:
                gone_since = None
            if now >= deadline:
                return status
            self.clock.sleep(pause)
            pause = min(pause * 1.5, 0.25)
            status = self.query(service.name)
        if status.state not in ("backoff", "crashed", "stopped"):
            return status
        said = _last_words(self.root, service, since=launched[0])
        reason = f"{said} ({status.reason})" if status.reason and said else status.reason or said
        return recordclass.evolve(status, state="crashed", reason=reason)

    def stop(self, names: Sequence[str]) -> list[InitStatus]:
        """Stop in order through the init system."""
        for name in names:
            self.halt(name)
        return list(self.status(names).values())
