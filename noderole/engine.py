"""Applying a plan: pre-start steps, then start, in dependency order, concurrently where allowed.

A service begins once everything it comes after has finished, and once every service it
``need``s is ready where that service declares a readiness check (bounded by the readiness
timeout); ``after`` orders the start only, as in OpenRC. Services run in the calling thread
until one has to wait (a wait whose condition does not hold at the first look, a readiness, a
plugin's ``Call`` still running after :data:`CALL_PATIENCE`, a start): the services ready
meanwhile then go on in a thread of their own, so waits and starts overlap, and no thread sits
waiting for a dependency. A chain runs in one thread; a re-apply that finds everything in place
starts none. A failed step or start fails that service with its reason; services
that ``need`` it are skipped and say so; services ordered after it (``need``, ``after``, its
``before``) that are waiting stop at once and name the root cause; everything else goes on.

Apply is idempotent: a service already running with the same definition fingerprint is left
alone. The fingerprint covers the command, arguments, environment, user, logs and supervision
settings, plus the fingerprint of every certificate its steps produced — konnectivity-server reads
its certificate only at start, so a re-minted certificate must restart it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from noderole import recordclass
from noderole.backends import status_to_act_on
from noderole.clock import Clock
from noderole.errors import NoderoleError, StepError
from noderole.plan import Plan, PlannedService
from noderole.records import Service, WriteFile
from noderole.root import NodeRoot
from noderole.stepcontext import StepContext
from noderole.steps import StepResult, run_steps, warm_certificates
from noderole.supervisor import _jsontext as jsontext
from noderole.supervisor import sha256  # the interpreter's own: no OpenSSL loaded

if TYPE_CHECKING:
    from noderole.backends import Backend, BackendStatus
    from noderole.stepcontext import Cancel

__all__ = [
    "ApplyReport",
    "Progress",
    "DEFINITION_PARTS",
    "ServiceReport",
    "StepTiming",
    "apply_plan",
    "compare_running",
    "definition_diff",
    "definition_digests",
    "definition_shown",
    "file_writers",
    "files_changed",
    "files_read",
    "fingerprint_base",
    "has_process",
    "restart_reasons",
    "stale_files",
    "written_files",
]

Status = Literal["started", "restarted", "running", "done", "failed", "skipped"]


class Progress(Protocol):
    """Console progress (OpenRC's `` * Starting x ... [ ok ]``); see :mod:`noderole.console`."""

    def starting(self, name: str, description: str) -> None: ...
    def waiting(self, name: str, what: str) -> None: ...
    def finished(self, report: ServiceReport) -> None: ...


@recordclass.frozen(kw_only=True)
class StepTiming:
    """How long one step took, for the ``cloud-init analyze blame``-style report."""

    kind: str
    """``wait``, ``certificate``, ``directories``, ``file``, ``call``, ``fail`` or ``start``."""
    description: str
    """The step's own description."""
    seconds: float
    """Duration."""
    detail: str = ""
    """What happened (``minted: SANs changed ...``)."""


@recordclass.frozen(kw_only=True)
class ServiceReport:
    """The outcome of applying one service."""

    name: str
    """Service name."""
    status: Status
    """started, restarted, running (already, untouched), done (milestone), failed, skipped."""
    reason: str = ""
    """Why it failed, was skipped or restarted."""
    pid: int | None = None
    """The process's pid, when it has one."""
    ready: bool | None = None
    """Readiness as of the end of apply (None: no readiness check)."""
    steps: tuple[StepTiming, ...] = ()
    """Timings of pre-start steps and of the start itself."""
    seconds: float = 0.0
    """From the moment its dependencies allowed it to begin to its end."""
    minted: tuple[str, ...] = ()
    """Certificates minted (node paths)."""

    @property
    def ok(self) -> bool:
        """True unless failed or skipped."""
        return self.status not in ("failed", "skipped")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "status": self.status,
            "reason": self.reason,
            "pid": self.pid,
            "ready": self.ready,
            "seconds": round(self.seconds, 6),
            "minted": list(self.minted),
            "steps": [recordclass.asdict(step) for step in self.steps],
        }


@recordclass.frozen(kw_only=True)
class ApplyReport:
    """The outcome of ``noderole apply ROLE``."""

    role: str
    """The applied role."""
    backend: str
    """Backend that started the services."""
    services: tuple[ServiceReport, ...]
    """One report per planned service, in plan order."""
    seconds: float
    """Total duration."""

    @property
    def ok(self) -> bool:
        """True when every service runs (or, for milestones, is done)."""
        return all(report.ok for report in self.services)

    @property
    def failed(self) -> list[ServiceReport]:
        """Failed and skipped services."""
        return [report for report in self.services if not report.ok]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``apply --json``)."""
        return {
            "role": self.role,
            "backend": self.backend,
            "ok": self.ok,
            "seconds": round(self.seconds, 6),
            "services": [report.to_dict() for report in self.services],
        }


_LATER_SUPERVISION = {
    "stop_scope": "group",
    "delegate": False,
    "open_files": None,
    "tasks": None,
    "notify": False,
}
"""Supervision fields added after the first release, with their defaults. A definition holds one
only when it differs from its default, so that an upgrade of noderole does not change the
fingerprint of every service, and a re-apply then restart them all."""


def _supervision(service: Service) -> dict[str, Any]:
    settings = recordclass.asdict(service.supervision)
    for key, default in _LATER_SUPERVISION.items():
        if settings[key] == default:
            del settings[key]
    return settings


def definition_digests(service: Service) -> dict[str, str]:
    """A digest per part of a definition, so a restart can say what changed (no secret stored)."""
    parts: dict[str, Any] = {
        "command": list(service.command or ()),
        "environment": service.revealed_environment(),
        "user": [service.user, service.group, service.working_directory],
        "logs": [service.pidfile, service.output_log, service.error_log],
        "supervision": _supervision(service),
    }
    return {
        key: sha256(jsontext.dumps(value, sort_keys=True).encode()).hexdigest()[:16]
        for key, value in parts.items()
    }


SHOWN_KEY = "shown"
"""Key, next to the digests of a service in the node state, of what a restart reason may show."""


def definition_shown(service: Service) -> str:
    """The parts of a definition a restart reason may quote, as JSON: every value but a
    secret's, which is kept as a short digest (enough to say *that* it changed)."""
    from noderole.records import Secret

    environment = {
        key: "***" + sha256(value.reveal().encode()).hexdigest()[:12]
        if isinstance(value, Secret)
        else value
        for key, value in service.environment.items()
    }
    shown = {
        "command": list(service.command or ()),
        "environment": environment,
        "user": [service.user, service.group, service.working_directory],
        "logs": [service.pidfile, service.output_log, service.error_log],
        "supervision": _supervision(service),
    }
    return jsontext.dumps(shown, sort_keys=True)


def definition_diff(before: str, after: str) -> list[str]:
    """What changed between two :func:`definition_shown` texts, for people (secrets as ***)."""
    try:
        old, new = jsontext.loads(before), jsontext.loads(after)
    except ValueError:
        return []
    changes: list[str] = []
    if old.get("command") != new["command"]:
        gone = [a for a in old.get("command", []) if a not in new["command"]]
        came = [a for a in new["command"] if a not in old.get("command", [])]
        if gone or came:
            words = ([f"removed {' '.join(gone)}"] if gone else []) + (
                [f"added {' '.join(came)}"] if came else []
            )
            changes.append(f"command line: {', '.join(words)}")
        else:
            changes.append("argument order changed")
    old_env, new_env = old.get("environment", {}), new["environment"]
    for key in sorted(set(old_env) | set(new_env)):
        if old_env.get(key) != new_env.get(key):
            secret = str(old_env.get(key, "")).startswith("***") or str(
                new_env.get(key, "")
            ).startswith("***")
            if secret:
                changes.append(f"environment {key} changed (secret, not shown)")
            else:
                changes.append(f"environment {key}: {old_env.get(key)!r} -> {new_env.get(key)!r}")
    for part in ("user", "logs"):
        if old.get(part) != new[part]:
            changes.append(f"{DEFINITION_PARTS[part]}: {old.get(part)} -> {new[part]}")
    old_sup = {**_LATER_SUPERVISION, **old.get("supervision", {})}
    new_sup = {**_LATER_SUPERVISION, **new["supervision"]}
    for key in sorted(new_sup):
        if old_sup.get(key) != new_sup[key]:
            changes.append(f"{key}: {old_sup.get(key)} -> {new_sup[key]}")
    return changes


DEFINITION_PARTS = {  # digest key -> what a restart reason calls it
    "command": "command or arguments",
    "environment": "environment",
    "user": "user, group or working directory",
    "logs": "pidfile or logs",
    "supervision": "supervision settings",
}


def written_files(service: Service) -> dict[str, str]:
    """What the service's own ``WriteFile`` steps write, a short digest (of mode and content)
    by path: its program reads them at start (k3s its config drop-ins)."""
    return {
        step.path: sha256(f"{step.mode:o}\0{step.content}".encode()).hexdigest()[:16]
        for step in service.pre_start
        if isinstance(step, WriteFile)
    }


def file_writers(plan: Plan, name: str) -> list[Service]:
    """The services whose ``WriteFile`` steps write what ``name``'s process reads at start: the
    milestones (services without a command) it needs, directly or through other milestones,
    then the service itself. k3s reads the role drop-in ``k3s-cluster-init`` or
    ``k3s-cluster-join`` writes: a role change rewrites it, and k3s must start again, as
    ``Requires=`` restarts it under systemd."""
    writers: list[Service] = []
    seen = {name}
    pending = list(plan[name].needs)
    while pending:
        needed = pending.pop()
        if needed in seen or needed not in plan:
            continue
        seen.add(needed)
        entry = plan[needed]
        if entry.service.command is None:
            writers.append(entry.service)
            pending.extend(entry.needs)
    return [*reversed(writers), plan[name].service]


def files_read(plan: Plan, name: str) -> dict[str, str]:
    """:func:`written_files` of every :func:`file_writers` service (a service's own step wins)."""
    files: dict[str, str] = {}
    for service in file_writers(plan, name):
        files.update(written_files(service))
    return files


def process_fingerprint(
    digests: Mapping[str, str],
    certificates: Sequence[str],
    files: Mapping[str, str] | None = None,
) -> str:
    """The fingerprint a service's process is started with: its definition's digests (as
    :func:`definition_digests` gives them) and its certificates' SHA-256 fingerprints, in the
    order of its steps (:func:`fingerprint_base`), then ``;`` and a ``KEY=DIGEST`` per file its
    own steps write (:func:`written_files`; KEY stands for the path). A running process whose
    base differs is restarted by ``apply``, and one started with another content of a file
    the steps write now (:func:`stale_files`). A file its steps no longer write (k3s copies
    ``config.yaml`` only while it is missing) is as it was: no change."""
    pairs = ";".join(
        f"{_file_key(path)}={digest}" for path, digest in sorted((files or {}).items())
    )
    return f"{_fingerprint(digests, certificates)};{pairs}"


def fingerprint_base(fingerprint: str) -> str:
    """The part of a process fingerprint that the definition and certificates make."""
    return fingerprint.partition(";")[0]


def stale_files(
    running: str,
    files: Mapping[str, str],
    rewritten: Iterable[str],
    *,
    root: NodeRoot,
    started_at: float | None,
) -> list[str]:
    """The files (of ``files``, as :func:`files_read` gives them) a process with the
    fingerprint ``running`` was started without, or with another content.

    A file the fingerprint names counts when its digest differs. A file it does not name (a
    process an older noderole started names none; one started before a milestone's file
    counted names only its own) counts when this apply rewrites it (``rewritten``) or when it
    was modified since the process started (``started_at``, its wall-clock start; ``root``
    holds them): an apply killed between a rewrite and the restart, or an older noderole that
    rewrote a drop-in and kept k3s running, left it reading another content. The others are
    taken as it read them."""
    _, _, tail = running.partition(";")
    started = dict(item.partition("=")[::2] for item in tail.split(";") if item)
    changed = set(rewritten)
    stale = []
    for path, digest in files.items():
        known = started.get(_file_key(path))
        if known is not None:
            if known != digest:
                stale.append(path)
        elif path in changed or _modified_since(root.local(path), started_at):
            stale.append(path)
    return sorted(stale)


def _modified_since(path: str, started_at: float | None) -> bool:
    if started_at is None:
        return False
    try:
        return os.stat(path).st_mtime > started_at
    except OSError:
        return False


def files_changed(paths: Sequence[str]) -> str:
    """A restart's reason for files its process read that changed since it started."""
    return f"{'file' if len(paths) == 1 else 'files'} {', '.join(paths)} changed"


def has_process(current: BackendStatus) -> bool:
    """Whether ``current`` is a process ``apply`` may keep: starting, running or ready, and not
    being stopped (a stop whose client was interrupted goes on in the supervisor, its state
    still the one it had: a start is queued behind it)."""
    return current.state in ("starting", "running", "ready") and not getattr(
        current, "stopping", False
    )


def compare_running(
    current: BackendStatus,
    fingerprint: str,
    files: Mapping[str, str],
    rewritten: Iterable[str],
    *,
    root: NodeRoot,
) -> tuple[bool, list[str]]:
    """Whether the running process ``current`` was started as ``fingerprint`` says a process
    of the service is started now (its definition and certificates: :func:`fingerprint_base`),
    and, when it was, the files it read that changed since (:func:`stale_files`; ``rewritten``
    is read only then). ``apply`` leaves the process running when the first holds and the
    second is empty; ``apply --dry-run`` decides the same way."""
    if fingerprint_base(current.fingerprint) != fingerprint_base(fingerprint):
        return False, []
    stale = stale_files(
        current.fingerprint,
        files,
        rewritten,
        root=root,
        started_at=getattr(current, "started_at", None),
    )
    return True, stale


def restart_reasons(
    service: Service,
    before: Mapping[str, str],
    digests: Mapping[str, str],
    *,
    minted: Sequence[str] = (),
    certificates: Sequence[str] = (),
    stale: Sequence[str] = (),
) -> list[str]:
    """Why a running process of ``service`` is restarted, for people: ``minted`` (a reason per
    certificate its steps mint, worded by the caller), what changed in its definition since the
    last apply recorded it (``before``, its digests and :data:`SHOWN_KEY`; nothing is said of a
    definition never recorded), the files it read that changed (``stale``), or, when the
    definition is as recorded and nothing is minted, the certificates its steps hold
    (``certificates``, paths), replaced since it started. Empty when none of these says why:
    the caller says "definition changed"."""
    reasons = list(minted)
    changed = [
        DEFINITION_PARTS[k] for k in sorted(digests) if before and before.get(k) != digests[k]
    ]
    shown = (
        definition_diff(before[SHOWN_KEY], definition_shown(service))
        if (changed and SHOWN_KEY in before)
        else []
    )
    if shown:
        reasons.append("; ".join(shown))
    elif changed:
        reasons.append(f"{', '.join(changed)} changed")
    if stale:
        reasons.append(files_changed(stale))
    elif before and not reasons and certificates:
        # The definition is as the last apply recorded it, and nothing is minted: what differs
        # from the start is a certificate replaced since (by the init system's own run of the
        # pre-start hook at boot, a renew interrupted before its restart, or by hand).
        said = "certificate" if len(certificates) == 1 else "certificates"
        reasons.append(
            f"{said} {', '.join(certificates)} changed since it was started, not by this apply"
        )
    return reasons


def _file_key(path: str) -> str:
    return sha256(path.encode()).hexdigest()[:12]


def _fingerprint(digests: Mapping[str, str], certificates: Sequence[str]) -> str:
    blob = jsontext.dumps(
        {"definition": digests, "certificates": list(certificates)}, sort_keys=True
    )
    return sha256(blob.encode()).hexdigest()


class _Told:
    """The apply's :class:`Progress`, told every line whatever becomes of the console: a
    reader that went away (``apply | head``, a boot console closed) loses its lines, while the
    services go on. An ``OSError`` writing a line is the console's; anything else is a bug of
    the progress object, and still raised."""

    __slots__ = ("_progress",)

    def __init__(self, progress: Progress) -> None:
        self._progress = progress

    def starting(self, name: str, description: str) -> None:
        with contextlib.suppress(OSError):
            self._progress.starting(name, description)

    def waiting(self, name: str, what: str) -> None:
        with contextlib.suppress(OSError):
            self._progress.waiting(name, what)

    def finished(self, report: ServiceReport) -> None:
        with contextlib.suppress(OSError):
            self._progress.finished(report)


class _Run:
    """One apply: the schedule, and the state its threads share."""

    def __init__(
        self,
        plan: Plan,
        *,
        root: NodeRoot,
        clock: Clock,
        backend: Backend,
        progress: Progress,
        readiness_timeout: float,
        previous: Mapping[str, Mapping[str, str]],
        progress_every: float = 0.0,
    ) -> None:
        from noderole.stepcontext import Cancel

        self.plan = plan
        self.progress_every = progress_every
        self.cancels = {entry.name: Cancel() for entry in plan.services}
        self.causes: dict[str, str] = {}  # failed or skipped service -> its root cause
        self.dependents = _dependents(plan)
        self.root = root
        self.clock = clock
        self.backend = backend
        self.progress = _Told(progress)
        self.readiness_timeout = readiness_timeout
        self.previous = previous
        self.done = {entry.name: threading.Event() for entry in plan.services}
        # The schedule: how many of its dependencies in this run each service still waits for,
        # and who waits for each; guarded by _schedule_lock. ``finished`` is set once all are.
        self._waiting: dict[str, int] = {}
        self._next: dict[str, list[PlannedService]] = {}
        for entry in plan.services:
            after = [d for d in entry.after if d in self.done]
            self._waiting[entry.name] = len(after)
            for dependency in after:
                self._next.setdefault(dependency, []).append(entry)
        self._left = len(plan.services)
        self._schedule_lock = threading.Lock()
        self.finished = threading.Event()
        if not self._left:
            self.finished.set()
        self.reports: dict[str, ServiceReport] = {}
        self.digests: dict[str, dict[str, str]] = {}
        self._ready_locks = {entry.name: threading.Lock() for entry in plan.services}
        self._ready: dict[str, str | None] = {}  # name -> None (ready) or why not
        self.current: Mapping[str, BackendStatus] = {}
        # Services ready to run that no thread has taken yet (guarded by _schedule_lock), and
        # how many threads were started for them that have not looked yet.
        self._pending: deque[PlannedService] = deque()
        self._unclaimed = 0
        self._caller = threading.current_thread()
        """The thread of :func:`apply_plan`: it runs services first, then watches for crashes."""
        self.watcher: threading.Thread | None = None
        """The thread that watches for crashes while the caller waits in a service of its own."""
        self.crashed: dict[str, str] = {}
        self.helpers: list[threading.Thread] = []
        """Threads this apply started (guarded by _schedule_lock): an interrupted one waits for
        them (:meth:`abandon`)."""
        self.abandoned = False
        """Set when the caller was interrupted: no service starts any more."""

    # ---------------------------------------------------------------- the schedule

    def drive(self) -> dict[str, str]:
        """Run the services in the calling thread, in plan order as they become ready, handing
        those ready meanwhile to another thread whenever one has to wait (:meth:`blocking`);
        then wait for the rest, watching for crashes. Returns service -> why it counts as
        failed (:func:`_watch_crashes`)."""
        with self._schedule_lock:
            self._pending.extend(e for e in self.plan.services if not self._waiting[e.name])
        self._drive()
        if self.watcher is not None:
            # In timed looks: a signal the kernel gave another thread sets the flag the main
            # thread's handler runs on, but wakes no wait of the main thread's. An untimed join
            # held a Ctrl-C or SIGTERM until the last service was done.
            while self.watcher.is_alive():
                self.watcher.join(WATCH_INTERVAL)
            return self.crashed
        return _watch_crashes(self)

    def blocking(self, *, caller: bool) -> None:
        """The thread running a service is about to wait: if services are ready that no thread
        has taken, start one for them; if that thread is the caller of :func:`apply_plan`
        (``caller``), which watches for crashes once it is free, start the watch in a thread of
        its own. Safe from any thread, any number of times."""
        with self._schedule_lock:
            helper = len(self._pending) > self._unclaimed
            if helper:
                self._unclaimed += 1
            watcher = None
            if caller and self.watcher is None and not self.finished.is_set():
                watcher = self.watcher = threading.Thread(
                    target=self._watch, name="apply:watch", daemon=True
                )
        # A thread is listed before it starts: a Ctrl-C between the start and the listing left
        # a running thread :meth:`abandon` did not wait for (its next step wrote into the node
        # after the apply had left).
        if helper:
            thread = threading.Thread(target=self._help, name="apply", daemon=True)
            with self._schedule_lock:
                self.helpers.append(thread)
            try:
                thread.start()
            except RuntimeError:  # no thread to be had: the threads that run take the work
                with self._schedule_lock:
                    self._unclaimed -= 1
                    self.helpers.remove(thread)
        if watcher is not None:
            with self._schedule_lock:
                self.helpers.append(watcher)
            try:
                watcher.start()
            except RuntimeError:  # the caller watches once it is free, as without a wait
                with self._schedule_lock:
                    self.watcher = None
                    self.helpers.remove(watcher)

    def abandon(self, reason: str, bound: float) -> None:
        """The caller was interrupted (Ctrl-C, a SIGTERM made one): start nothing more, end
        every wait (each looks at its token within :data:`~noderole.waits.CANCEL_CHECK`), and
        wait up to ``bound`` seconds for this apply's other threads, so that what the caller
        does next (a rehearsal removing its scratch root) is not undone by a step still
        running in one of them. A step that is not a wait (a certificate, a file) finishes.

        The calling thread takes no lock here: an interrupt can leave one it was waiting on
        held (a lock or event's own lock, released by nothing once the exception is raised),
        and this thread would wait on it for good. The tokens and events are set from a thread
        of their own, waited for within the same bound."""
        import time  # real time: the threads' own waits look at their tokens in it

        deadline = time.monotonic() + bound
        self.abandoned = True
        stopper = threading.Thread(target=self._stop, args=(reason,), name="apply:stop")
        stopper.daemon = True
        try:
            stopper.start()
        except RuntimeError:  # no thread to be had: the caller leaves without waiting
            return
        stopper.join(bound)
        for thread in list(self.helpers):  # a copy made under the GIL, as appends are
            if thread.ident is not None:  # listed, but the interrupt came before its start
                thread.join(max(0.0, deadline - time.monotonic()))

    def _stop(self, reason: str) -> None:
        with self._schedule_lock:
            self._pending.clear()
        for cancel in self.cancels.values():
            cancel.cancel(reason)
        for event in self.done.values():  # what waits on a dependency finds it abandoned
            event.set()
        self.finished.set()

    def _watch(self) -> None:
        self.crashed = _watch_crashes(self)

    def _help(self) -> None:
        with self._schedule_lock:
            self._unclaimed -= 1
        self._drive()

    def _drive(self) -> None:
        """Take ready services one at a time until none is left untaken. A chain runs here to
        its end: what a service's end makes ready is taken next."""
        current = threading.current_thread()
        caller = current is self._caller
        while True:
            with self._schedule_lock:
                if not self._pending:
                    return
                entry = self._pending.popleft()
            if not caller:
                current.name = f"apply:{entry.name}"
            carried_on = False
            try:
                self.run(entry, caller=caller)
                carried_on = True
            except Exception:
                if not caller:
                    raise  # a console's bug ends this thread, with its traceback
                import traceback  # only for a console's bug: not on every apply's path

                traceback.print_exc()  # the caller's own: told as a thread's is; it drives on
                carried_on = True
            finally:
                self._release(entry.name)
                if not carried_on and not caller:
                    self.blocking(caller=False)  # this thread ends: another takes what is left

    def _release(self, name: str) -> None:
        """``name`` is done: the services now waiting for nothing are taken next, in plan
        order, before anything ready earlier (a chain runs on in the same thread)."""
        ready = []
        with self._schedule_lock:
            for dependent in self._next.get(name, ()):
                self._waiting[dependent.name] -= 1
                if not self._waiting[dependent.name]:
                    ready.append(dependent)
            self._pending.extendleft(reversed(ready))
            self._left -= 1
            if not self._left:
                self.finished.set()

    # ---------------------------------------------------------------- per service

    def run(self, entry: PlannedService, *, caller: bool = False) -> None:
        try:
            try:
                report = self._service(entry, caller=caller)
            except BaseException as exc:  # a bug (or a plugin's SystemExit) fails one service
                if caller and isinstance(exc, KeyboardInterrupt):
                    raise  # Ctrl-C ends the apply, as it did while the caller only watched
                report = ServiceReport(
                    name=entry.name, status="failed", reason=f"{type(exc).__name__}: {exc}"
                )
            self.reports[entry.name] = report
            if not report.ok:
                cause = self.causes.setdefault(entry.name, f"{entry.name} failed: {report.reason}")
                # Fail fast: whatever waits after this service stops waiting, naming the cause.
                for dependent in self.dependents.get(entry.name, ()):
                    self.cancels[dependent].cancel(cause)
            self.progress.finished(report)
        finally:  # whatever happened above, the dependents must not wait forever
            self.done[entry.name].set()

    def _service(self, entry: PlannedService, *, caller: bool = False) -> ServiceReport:
        # Dependencies outside this run (``restart`` of a few services) are taken as they are.
        after = [d for d in entry.after if d in self.done]
        for dependency in after:
            # In timed looks, as drive's join: this may be the main thread, where a signal
            # another thread took is handled only once a wait of its own ends.
            while not self.done[dependency].wait(WATCH_INTERVAL):
                pass
        service = entry.service
        cancel = self.cancels[entry.name]
        if self.abandoned:
            return ServiceReport(
                name=entry.name, status="skipped", reason=f"not started: {cancel.reason}"
            )
        for dependency in entry.needs:
            dep = self.reports.get(dependency)
            if dep is not None and not dep.ok:
                self.causes[entry.name] = self.causes.get(dependency, "")
                return ServiceReport(
                    name=entry.name,
                    status="skipped",
                    reason=f"not started: it needs {dependency}, which {_verb(dep)}",
                )
        announced: list[bool] = []

        def announce() -> None:
            # "Starting" only for a service that waits or starts: one left running says so alone.
            if not announced:
                announced.append(True)
                self.progress.starting(entry.name, service.description)

        def block() -> None:
            self.blocking(caller=caller)

        def waiting(what: str) -> None:
            # Called when a wait does not hold at the first look (from the thread of a Call's
            # function too): the services ready meanwhile must not wait behind this one.
            block()
            announce()
            self.progress.waiting(entry.name, what)

        start = self.clock.monotonic()

        def report(
            status: Status, steps: Sequence[StepTiming], reason: str = "", **more: Any
        ) -> ServiceReport:
            """This service's report, its time counted from ``start``."""
            seconds = self.clock.monotonic() - start
            return ServiceReport(
                name=entry.name,
                status=status,
                reason=reason,
                steps=tuple(steps),
                seconds=seconds,
                **more,
            )

        gates: list[StepTiming] = []
        # ``need``: begin once the needed service is ready; ``after`` orders the start only.
        for dependency in (d for d in after if d in entry.needs):
            began = self.clock.monotonic()
            why_not = self._wait_ready(dependency, cancel, waiting, block)
            dep = self.reports[dependency]
            gated = self.plan[dependency].service.readiness is not None and dep.status != "done"
            if gated and dep.ok:
                gates.append(
                    StepTiming(
                        kind="readiness",
                        description=f"readiness of {dependency}",
                        seconds=self.clock.monotonic() - began,
                        detail=why_not or "ready",
                    )
                )
            if why_not is not None:
                if cancel.cancelled:
                    self.causes[entry.name] = cancel.reason
                    why_not = f"not started: {cancel.reason}"
                else:
                    self.causes[entry.name] = f"{dependency} {why_not}"
                    why_not = f"not started: it needs {dependency}, which is {why_not}"
                return report("skipped", gates, why_not)
        ctx = StepContext(
            service=entry.name,
            root=self.root,
            clock=self.clock,
            progress=waiting,
            cancel=cancel,
            progress_every=self.progress_every,
            blocking=block,
        )
        from noderole.errors import WaitCancelled

        try:
            results = run_steps(service.pre_start, ctx)
        except StepError as exc:
            done: list[StepResult] = getattr(exc, "results", [])
            timings = [*gates, *(_timing(r) for r in done)]
            failing = service.pre_start[len(done)] if len(done) < len(service.pre_start) else None
            if failing is not None:
                spent = self.clock.monotonic() - start - sum(t.seconds for t in timings)
                timings.append(
                    StepTiming(
                        kind=_kind(failing),
                        description=failing.describe(),
                        seconds=max(0.0, spent),
                        detail=str(exc),
                    )
                )
            if isinstance(exc, WaitCancelled):
                self.causes[entry.name] = str(exc)
                return report("skipped", timings, f"not started: {exc}")
            return report("failed", timings, f"{exc}{self._runs_on(entry.name)}")
        timings = [*gates, *(_timing(r) for r in results)]
        minted = tuple(
            r.step.cert_path  # type: ignore[union-attr]
            for r in results
            if r.certificate is not None and r.certificate.action == "minted"
        )
        if service.command is None:
            # An init system must know command-less services too: dependents name them in
            # Requires=. Only backends that render files have this (optional) method.
            record = getattr(self.backend, "record_milestone", None)
            if record is not None:
                try:
                    record(service)
                except NoderoleError as exc:
                    return report("failed", timings, f"could not record: {exc}")
            announce()
            return report("done", timings)
        digests = definition_digests(service)
        self.digests[entry.name] = {**digests, SHOWN_KEY: definition_shown(service)}
        certificates = [r.certificate.fingerprint for r in results if r.certificate is not None]
        files = files_read(self.plan, entry.name)
        fingerprint = process_fingerprint(digests, certificates, files)
        current = self.current.get(entry.name)
        # A stop under way (one whose client was interrupted goes on in the supervisor) is no
        # process to keep: the start is queued behind it.
        running = current is not None and has_process(current)
        stale: list[str] = []
        restarted_needs: list[str] = []
        if running and current is not None:
            same, stale = compare_running(
                current,
                fingerprint,
                files,
                (
                    r.step.path
                    for r in results
                    if isinstance(r.step, WriteFile) and r.detail == "written"
                ),
                root=self.root,
            )
            if same and not stale:
                restarted_needs = self._restarted_needs(entry)
                if not restarted_needs:
                    self._backend_ready(entry.name, current.state)
                    return report("running", timings, "already running", pid=current.pid)
        reason = ""
        if restarted_needs:
            said = " and ".join(restarted_needs)
            was = "was" if len(restarted_needs) == 1 else "were"
            reason = f"restarted: it needs {said}, which {was} restarted"
        elif running:
            reason = self._restart_reason(entry.name, digests, results, stale)
        announce()
        block()  # a start takes a while (an init system's start job): others go on meanwhile
        began = self.clock.monotonic()
        try:
            if restarted_needs:  # the same definition: a start would find it running
                self.backend.stop([entry.name])
            status = self.backend.start(service, fingerprint=fingerprint)
        except NoderoleError as exc:
            return report("failed", timings, f"could not start: {exc}")
        timings.append(
            StepTiming(kind="start", description="start", seconds=self.clock.monotonic() - began)
        )
        if status.state in ("crashed", "stopped"):
            return report("failed", timings, f"exited at start: {status.reason or status.state}")
        self._backend_ready(entry.name, status.state)
        if status.state == "starting" and status.reason:
            # Still under way when the backend let go (a systemd job queued behind its After=
            # units): the report says so, and why.
            reason = f"{reason}; {status.reason}" if reason else status.reason
        return report(
            "restarted" if running else "started", timings, reason, pid=status.pid, minted=minted
        )

    def _restarted_needs(self, entry: PlannedService) -> list[str]:
        """The services ``entry`` needs that this apply restarted: a process started with what
        they gave it (a socket, a connection) is restarted after them, as OpenRC restarts what
        needs a restarted service and systemd what ``Requires=`` it. An init system does that
        itself (``restarts_what_needs``): then nothing more is done here."""
        if getattr(self.backend, "restarts_what_needs", False):
            return []
        return [
            name
            for name in entry.needs
            if (done := self.reports.get(name)) is not None and done.status == "restarted"
        ]

    def _runs_on(self, name: str) -> str:
        """What a failed pre-start leaves running: the process an earlier apply started, as
        it was (its definition, its certificates), or nothing to say."""
        current = self.current.get(name)
        if current is None or current.state not in ("starting", "running", "ready"):
            return ""
        pid = f" (pid {current.pid})" if current.pid else ""
        return f"; the process started earlier{pid} runs on unchanged"

    def _restart_reason(
        self,
        name: str,
        digests: Mapping[str, str],
        results: Sequence[StepResult],
        stale: Sequence[str] = (),
    ) -> str:
        reasons = restart_reasons(
            self.plan[name].service,
            self.previous.get(name, {}),
            digests,
            minted=[
                f"certificate {r.step.cert_path} re-minted ({r.certificate.reason})"  # type: ignore[union-attr]
                for r in results
                if r.certificate is not None and r.certificate.action == "minted"
            ],
            certificates=[
                r.step.cert_path  # type: ignore[union-attr]
                for r in results
                if r.certificate is not None
            ],
            stale=stale,
        )
        return "restarted: " + ("; ".join(reasons) if reasons else "definition changed")

    def _backend_ready(self, name: str, state: str) -> None:
        """The backend found ``name`` ready (its supervisor's or init system's run of the same
        readiness check passed, or a test's :class:`~noderole.testing.RecordingBackend` says
        so): its dependents need not check again."""
        if state == "ready":
            self._ready[name] = None

    def _wait_ready(
        self,
        name: str,
        cancel: Cancel,
        progress: Callable[[str], None],
        block: Callable[[], None],
    ) -> str | None:
        """Wait (once, shared by all dependents) for ``name``'s readiness; None when ready.

        The wait itself is not cancelled (another dependent may still be waiting for it); a
        dependent whose token is cancelled stops waiting for the lock at once. ``block`` is
        called before waiting for another dependent's wait.
        """
        readiness = self.plan[name].service.readiness
        report = self.reports[name]
        if readiness is None or not report.ok or report.status == "done":
            return None
        lock = self._ready_locks[name]
        if not lock.acquire(blocking=False):
            block()
            while not lock.acquire(timeout=CANCEL_LOCK_CHECK):
                if cancel.cancelled:
                    return "cancelled"
        try:
            if name in self._ready:
                return self._ready[name]
            from noderole.errors import WaitCancelled
            from noderole.waits import run_wait

            timeout = min(readiness.timeout, self.readiness_timeout)
            bounded = recordclass.evolve(readiness, timeout=timeout)
            try:
                run_wait(
                    bounded,
                    root=self.root,
                    clock=self.clock,
                    progress=lambda what: progress(f"{name} readiness: {what}"),
                    cancel=cancel,
                    progress_every=self.progress_every,
                )
                self._ready[name] = None
            except WaitCancelled:
                return "cancelled"  # not recorded: another dependent may still wait
            except NoderoleError:
                self._ready[name] = f"not ready after {timeout:g}s"
            return self._ready[name]
        finally:
            self._ready_locks[name].release()


def _verb(report: ServiceReport) -> str:
    if report.status == "skipped":
        return f"was not started ({report.reason.removeprefix('not started: ')})"
    return f"failed: {report.reason}"


WATCH_INTERVAL = 0.2
"""Seconds between looks (real time) at started services while others still wait: one that
crash-loops past its respawn limit meanwhile fails what waits after it."""


def _watch_crashes(run: _Run) -> dict[str, str]:
    """Wait until every service of ``run`` is done; meanwhile, cancel the dependents of a
    started service that gave up respawning or was stopped (its supervisor killed). Returns
    service -> why it counts as failed. Respawning alone is no failure."""
    crashed: dict[str, str] = {}
    while not run.finished.wait(WATCH_INTERVAL):
        watched = [
            name
            for name, report in list(run.reports.items())
            if report.status in ("started", "restarted", "running")
            and name not in crashed
            and any(not run.done[d].is_set() for d in run.dependents.get(name, ()))
        ]
        if not watched:
            continue
        for name, status in run.backend.status(watched).items():
            if status.state == "crashed":
                why = f"crashed after start: {status.reason or 'gave up respawning'}"
            elif status.state == "stopped":
                # Nothing of this apply stops a service (the node lock keeps `stop` out): its
                # supervisor was killed (the watchdog ended its processes), or someone stopped
                # it by hand. It will not come back by itself.
                why = f"stopped after start: {status.reason or 'not by this apply'}"
            else:
                continue
            crashed[name] = why
            for dependent in run.dependents.get(name, ()):
                run.cancels[dependent].cancel(f"{name} {why}")
    return crashed


ABANDON_BOUND = 5.0
"""Seconds an interrupted apply waits for its other threads to stop (see :meth:`_Run.abandon`)."""

CANCEL_LOCK_CHECK = 0.05
"""Seconds between looks at a dependent's cancellation while another dependent holds a readiness
wait it shares."""


def _ready(status: BackendStatus | None) -> bool:
    return status is not None and status.state == "ready"


def _dependents(plan: Plan) -> dict[str, list[str]]:
    """Service -> the services of ``plan`` ordered after it by ``need``, ``after`` or its own
    ``before`` (not ``want`` or ``use``: a failure there is tolerated, as in OpenRC)."""
    result: dict[str, list[str]] = {}
    for entry in plan.services:
        for word in ("need", "after"):
            for dependency in entry.resolved.get(word, ()):
                result.setdefault(dependency, []).append(entry.name)
        for dependent in entry.resolved.get("before", ()):
            result.setdefault(entry.name, []).append(dependent)
    return result


def _kind(step: object) -> str:
    from noderole.records import WAIT_TYPES, Fail

    if isinstance(step, WAIT_TYPES):
        return "wait"
    if isinstance(step, Fail):
        return "fail"
    return type(step).__name__.lower()


def _timing(result: StepResult) -> StepTiming:
    return StepTiming(
        kind=result.kind,
        description=result.step.describe(),
        seconds=result.seconds,
        detail=result.detail,
    )


def apply_plan(
    plan: Plan,
    *,
    root: NodeRoot,
    clock: Clock,
    backend: Backend,
    progress: Progress,
    readiness_timeout: float = 60.0,
    progress_every: float = 0.0,
    previous: Mapping[str, Mapping[str, str]] | None = None,
    on_digests: Callable[[dict[str, dict[str, str]]], None] | None = None,
) -> ApplyReport:
    """Apply ``plan`` through ``backend``; never raises for a service's failure (see the report)."""
    run = _Run(
        plan,
        root=root,
        clock=clock,
        backend=backend,
        progress=progress,
        readiness_timeout=readiness_timeout,
        previous=previous or {},
        progress_every=progress_every,
    )
    started = clock.monotonic()
    pre_start = (step for entry in plan.services for step in entry.service.pre_start)
    warm_certificates(pre_start, root=root, now=clock.time())
    run.current = status_to_act_on(backend, [entry.name for entry in plan.services])
    try:
        crashed = run.drive()
    except BaseException:  # Ctrl-C in the caller: the other threads stop before it leaves
        run.abandon("the apply was interrupted", ABANDON_BOUND)
        raise
    if on_digests is not None:
        on_digests(run.digests)
    # Readiness as of now: apply waited for it only where a dependent needed it. A service
    # left running that was already ready when the run began is taken as it was then (a
    # re-apply that changed nothing asks the backend once); any other is asked again.
    final = dict(run.current)
    ask = [
        e.name
        for e in plan.services
        if e.service.readiness is not None
        and not (run.reports[e.name].status == "running" and _ready(final.get(e.name)))
    ]
    if ask:
        final.update(backend.status(ask))
    reports = []
    for entry in plan.services:
        report = run.reports[entry.name]
        now = final.get(entry.name)
        if entry.service.readiness is not None and report.ok and report.status != "done":
            report = recordclass.evolve(report, ready=now is not None and now.state == "ready")
        if entry.name in crashed and report.ok:
            report = recordclass.evolve(
                report, status="failed", reason=crashed[entry.name], pid=None
            )
        reports.append(report)
    return ApplyReport(
        role=plan.role,
        backend=backend.name,
        services=tuple(reports),
        seconds=clock.monotonic() - started,
    )
