"""The supervisor daemon: one process, one thread, one event loop for every service of the node.

The loop (:mod:`._loop`) waits on the control socket (:mod:`._server`), one ``pidfd`` per child
(a child's exit wakes the loop at once: no SIGCHLD race, no polling), the pipes carrying
children's output (:mod:`._sinks`), a self-pipe for signals (SIGHUP reopens every log, its own
too; SIGTERM/SIGINT stop everything and exit), and a heap of timers (respawn delays, stop
timeouts, readiness ticks). Each service is a :class:`~._unit.Unit`. A watchdog
(:mod:`._watchdog`) ends the services if this daemon is ever SIGKILLed.

Only the standard library and ``noderole.supervisor`` are imported (a test guards it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable

from noderole.supervisor import (
    _fdlimit,
    _log,
    _pidfile,
    _proc,
    _protocol,
    _safeopen,
    _state,
    _textfile,
    _title,
    _watchdog,
)
from noderole.supervisor._log import flush_suppressed, log, log_limited
from noderole.supervisor._loop import Loop, Timer, guarded
from noderole.supervisor._server import BACKLOG, Handler, Reply, Server
from noderole.supervisor._sessions import Sessions
from noderole.supervisor._sinks import Sinks
from noderole.supervisor._spec import ProcessSpec
from noderole.supervisor._status import ServiceStatus
from noderole.supervisor._unit import KILL_GRACE, Unit

TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
if TYPE_CHECKING:
    from typing import Any

__all__ = ["NAME", "main"]

NAME = _title.NAME
STARTUP_GRACE = 10.0
"""Seconds a daemon with nothing to supervise waits for its first request before exiting."""
FLUSH_GAP_MIN = 0.02
"""Seconds between two writes of the state file, at least (see :meth:`Daemon.flush`)."""
FLUSH_GAP_UNWAITED = 0.1
"""Seconds between two writes when no client waits for the write (respawns, exits): a
crash-looping node changes its services hundreds of times a second, and the watchdog, told of
every new process group at once, covers the moments the file lags behind."""
RUN_DIR_CHECK = 1.0
"""Seconds between two looks at the run directory (made again if someone removed it) and at the
node root (the daemon stops everything and exits once it is gone)."""
WATCHDOG_RETRY = 1.0
"""Seconds between two tries to fork a new watchdog while the machine refuses a process."""


class Daemon:
    """Serves requests and keeps services alive until nothing is left to supervise."""

    def __init__(self, run_dir: str, abstract: socket.socket | None = None) -> None:
        self.run_dir = run_dir
        self.state_path = os.path.join(run_dir, _protocol.STATE_NAME)
        self.pid_path = os.path.join(run_dir, _protocol.PID_NAME)
        self.loop = Loop()
        self.sinks = Sinks(self.loop)
        self.sessions = Sessions(self.loop)
        """The services' sessions in /proc: one listing shared by the looks of a turn."""
        handlers: dict[str, Handler] = {
            "ping": self.op_ping,
            "modules": self.op_modules,
            "status": self.op_status,
            "start": self.op_start,
            "restart": self.op_restart,
            "stop": self.op_stop,
            "shutdown": self.op_shutdown,
            "textfile": self.op_textfile,
        }
        self.server = Server(
            self.loop, os.path.join(run_dir, _protocol.SOCKET_NAME), handlers, abstract
        )
        self.lock_fd = -1
        """The run directory's lock file, flocked for life (the abstract name is the real guard)."""
        self.units: dict[str, Unit] = {}
        self.past: dict[str, ServiceStatus] = {}
        """Final statuses from earlier daemons, reported until the service is started again."""
        self.killed_leftovers: dict[str, list[int]] = {}
        """What :meth:`recover` killed of a killed predecessor's services (name -> pids), told
        to the first stop (the client that started this daemon to end them says so)."""
        self.exiting = False
        self.dirty = False
        self.next_flush = 0.0
        self.last_flush = 0.0
        self.flush_timer: Timer | None = None
        self.flushed_waiters: list[Callable[[], None]] = []
        self.state_failing: int | None = 0
        """The errno of the state write that failed last (None: no errno), 0 while it works."""
        self.encoded: _state.Encoded = {}
        """Each recorded status's JSON, kept between state writes (_state.encode_state)."""
        self.started = time.monotonic()
        self.ever_supervised = False
        self.unwanted = False
        """Its launcher gave up before the ready word: no first request is waited for."""
        self.self_ticks = (_proc.proc_stat(os.getpid()) or _proc.ProcStat(0, "R", 0, 0, 0, 0))[5]
        self.watchdog_pid: int | None = None
        """The process that ends the services if this daemon is SIGKILLed."""
        self.watchdog_fd = -1
        self.watchdog_w = -1
        """Where each new process group is told to the watchdog (_watchdog.Groups)."""
        self.watchdog_refused = 0
        """Forks of a new watchdog refused in a row (see :meth:`restart_watchdog`)."""
        self.textfile = _textfile.Textfile(
            lambda names: [self.status_of(n) for n in names], self.loop.call_later, log
        )
        """noderole.prom, rewritten after state changes once the CLI asked, and with its
        heartbeat at least once a minute (_textfile)."""
        self.root_identity: tuple[int, int] | None = None
        """The node root (``ROOT`` of ``ROOT/run/noderole``) this daemon serves, as it was when it
        started; None if it could not be seen (nothing is then checked)."""
        with contextlib.suppress(OSError):
            self.root_identity = _protocol.anchor_identity(run_dir)
        self.root_gone = False

    # ---- start-up and shut-down

    def recover(self) -> None:
        """Kill what a SIGKILLed predecessor left running, and keep its final statuses."""
        state = _state.load_state(self.state_path, log)
        killed = self.killed_leftovers = _state.kill_leftovers(state)
        for name, status in state.services.items():
            if status.active:
                reason = "supervisor was killed"
                if name in killed:
                    pids = " ".join(map(str, killed[name]))
                    reason += f"; killed its leftover processes: {pids}"
                    log(f"{name}: killed leftover processes of a killed supervisor: {pids}")
                _pidfile.remove(status.pidfile, status.pid, name)
                status = status.but(state="stopped", reason=reason)
            self.past[name] = status.but(pid=None, start_ticks=None, started_at=None)

    def start_watchdog(self) -> None:
        """Fork the process that ends the services if this daemon is SIGKILLed (_watchdog)."""
        known = {
            name: (unit.pid, unit.start_ticks)
            for name, unit in self.units.items()
            if unit.pid is not None and unit.start_ticks is not None
        }
        if self.watchdog_w >= 0:
            os.close(self.watchdog_w)
            self.watchdog_w = -1  # until the new one is forked: its number may be reused
        pid, self.watchdog_w = _watchdog.fork_watchdog(
            self.run_dir, self.state_path, self.self_ticks, known
        )
        self.watchdog_pid = pid
        self.watchdog_fd = os.pidfd_open(pid)
        self.loop.add_reader(self.watchdog_fd, self.on_watchdog_exit)

    def on_watchdog_exit(self) -> None:
        """The watchdog died (someone killed it): reap it and start another."""
        pid = self.watchdog_pid
        if pid is None:
            return
        done, status = os.waitpid(pid, os.WNOHANG)
        if not done:
            return
        self.loop.remove_reader(self.watchdog_fd)
        os.close(self.watchdog_fd)
        log(f"watchdog {pid} exited ({os.waitstatus_to_exitcode(status)}); starting another")
        self.watchdog_pid = None
        self.restart_watchdog()

    def restart_watchdog(self) -> None:
        """Start another watchdog, and keep trying every :data:`WATCHDOG_RETRY` seconds while
        the machine refuses (no process to be had): the services run on meanwhile, and the
        watchdog forked at last is told of every one of them."""
        if self.exiting or self.watchdog_pid is not None:
            return
        try:
            self.start_watchdog()
        except OSError as e:
            if not self.watchdog_refused:  # said once, not every second
                log(
                    f"cannot start another watchdog: {_refusal(e)}; trying again every "
                    f"{WATCHDOG_RETRY:g}s"
                )
            self.watchdog_refused += 1
            self.loop.call_later(WATCHDOG_RETRY, self.restart_watchdog)
            return
        if self.watchdog_refused:
            log(f"another watchdog started after {self.watchdog_refused} refusals")
            self.watchdog_refused = 0

    def stop_watchdog(self) -> None:
        """A clean exit has stopped every service itself: end the watchdog before going."""
        pid, self.watchdog_pid = self.watchdog_pid, None
        if pid is None:
            return
        if self.watchdog_w >= 0:
            os.close(self.watchdog_w)
            self.watchdog_w = -1
        self.loop.remove_reader(self.watchdog_fd)
        os.close(self.watchdog_fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)

    def record_group(self, name: str, pgid: int | None, ticks: int | None) -> bool:
        """Tell the watchdog that ``name`` now runs as group ``pgid`` (None: nothing runs).

        False when it could not be told (its pipe is full): the caller must undo the start, or
        the group would be unknown to the watchdog should the state file not be written either.
        A watchdog that died is not a failure: its replacement is forked knowing every group.
        """
        if self.watchdog_w < 0:
            return True
        try:
            os.write(self.watchdog_w, _watchdog.encode_group(name, pgid, ticks))
        except BlockingIOError:
            return False
        except OSError:
            return True
        return True

    def persist(self) -> None:
        """Note that the state changed; :meth:`flush` writes it after the event batch.

        Writing after the event batch, not in the middle of a respawn, keeps the file write out
        of the respawn latency (the new child is already running while it happens).
        """
        self.dirty = True
        self.textfile.changed()

    def after_flush(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the state file records what is true now (or at once)."""
        if self.dirty:
            self.flushed_waiters.append(callback)
        else:
            callback()

    def flush(self, *, force: bool = False) -> None:
        """Write the state file if something changed, at most once per :attr:`flush_gap`.

        A write costs time in proportion to the services (tens of ms at 1,000): under a burst
        of changes (an apply or a stop of hundreds) the writes are coalesced, the next one due
        twice the last one's duration later, so writing takes at most a third of the daemon's
        time. A start is answered only once a write covers it (:meth:`after_flush`): a client
        told "started" can count on the watchdog knowing the process. So when clients wait for
        a write and the loop has nothing else to do, the write is made at once: waiting out the
        gap would only leave the daemon idle while every start in flight waits (there is nothing
        left to coalesce). Changes nobody waits for (respawns, exits) are written at most every
        :data:`FLUSH_GAP_UNWAITED`: with 200 services crash-looping, writing them every 20 ms
        was a quarter of the daemon's time.
        """
        if not self.dirty:
            return
        now = time.monotonic()
        waiting = bool(self.flushed_waiters)
        due = self.next_flush
        if not waiting:
            due = max(due, self.last_flush + FLUSH_GAP_UNWAITED)
        if not force and now < due and not (waiting and not self.loop.busy()):
            timer = self.flush_timer
            if timer is None or timer.when > due:  # a waiter came: the shorter gap now
                if timer is not None:
                    timer.cancel()
                self.flush_timer = self.loop.call_later(due - now, self._flush_due)
            return
        if self.flush_timer is not None:
            self.flush_timer.cancel()
            self.flush_timer = None
        self.dirty = False
        state = _state.State(
            services={**self.past, **{n: u.status() for n, u in self.units.items()}},
            supervisor_pid=os.getpid(),
            supervisor_ticks=self.self_ticks,
        )
        try:
            _state.write_state(self.state_path, state, self.encoded)
        except OSError as e:
            # Said once (again if the error changes), not at every write: with /run full, a
            # crash-looping node would rotate the log's history away within a minute.
            if self.state_failing != e.errno:
                log_limited(
                    "state file",
                    f"cannot write {self.state_path}: {e}; not said again until it is written "
                    "or fails otherwise",
                )
            self.state_failing = e.errno
        else:
            if self.state_failing != 0:
                log_limited("state file", f"{self.state_path} written again")
            self.state_failing = 0
        done = self.last_flush = time.monotonic()
        self.next_flush = done + max(FLUSH_GAP_MIN, 2 * (done - now))
        waiters, self.flushed_waiters = self.flushed_waiters, []
        for waiter in waiters:
            guarded(waiter)

    def _flush_due(self) -> None:
        self.flush_timer = None  # the loop wakes up; run() then flushes

    def write_pid(self) -> None:
        """The daemon's own pid file (a random ``O_EXCL`` temporary, renamed; 0600)."""
        try:
            _safeopen.replace_file(self.pid_path, f"{os.getpid()}\n".encode(), mode=0o600)
        except OSError as e:
            raise OSError(e.errno, f"cannot write {self.pid_path}: {e.strerror or e}") from None

    def check_run_dir(self) -> None:
        """Make the run directory again if it was removed under this daemon (``rm -rf``).

        The daemon stays the node's only one (it holds the abstract name), so the files that
        describe it (socket, pid file, lock, state) are simply written again where clients and
        the watchdog look for them. Not when the node root itself is gone
        (:meth:`node_root_present`): then the daemon stops everything and exits.
        """
        if self.exiting or not self.node_root_present():
            return
        self.loop.call_later(RUN_DIR_CHECK, self.check_run_dir)
        if self.server.path_is_ours():
            return
        log(f"{self.run_dir} was removed or replaced under the running daemon: making it again")
        try:
            _safeopen.private_dir(self.run_dir)
            lock = _lock(self.run_dir, 0.0)
            if lock is not None:
                if self.lock_fd >= 0:
                    os.close(self.lock_fd)
                self.lock_fd = lock
            self.server.rebind()
            self.write_pid()
        except OSError as e:
            log(f"cannot make {self.run_dir} again: {e}")
        self.persist()

    def node_root_present(self) -> bool:
        """True while the node root is the one this daemon started on; else stop and exit.

        A scratch root removed under a running daemon (a rehearsal cleaned up, a benchmark
        killed) leaves services whose programs and files are gone: they would crash-loop for
        ever, and no client could reach the daemon any more (its address derives from the
        root). A root made again at the same path is another node (another address). So the
        daemon stops every service, says why, and exits; it makes no directory under that path.
        One ``stat`` on the periodic tick and before each respawn.
        """
        if self.root_gone:
            return False
        if self.root_identity is None:
            return True
        try:
            now: tuple[int, int] | None = _protocol.anchor_identity(self.run_dir)
        except (FileNotFoundError, NotADirectoryError):
            now = None
        except OSError:
            return True  # unreadable for a moment is not gone
        if now == self.root_identity:
            return True
        self.root_gone = True
        log(
            f"the node root {_protocol.anchor_path(self.run_dir)} was removed or replaced under "
            "the running daemon: stopping every service and exiting"
        )
        self.stop_all(lambda: setattr(self, "exiting", True))
        return False

    def idle(self) -> bool:
        """Nothing to supervise and nobody waiting for an answer."""
        if self.server.busy or any(u.active for u in self.units.values()):
            return False
        if self.ever_supervised or self.unwanted:
            return True
        return time.monotonic() - self.started > STARTUP_GRACE

    def run(self) -> None:
        while not (self.exiting or self.idle()):
            self.loop.run_once(1.0)
            self.flush()
            self.textfile.flush()  # at least once a second: the heartbeat needs no timer
            flush_suppressed()
        self.close()

    def close(self) -> None:
        """Stop listening, answer queued clients "retry", drop the pid file, persist, and go."""
        self.server.close()
        self.persist()
        if self.root_gone:
            self.dirty = False  # nowhere to write it: the node root is gone
        self.flush(force=True)
        self.textfile.close()  # the last state (all stopped) reaches the fleet, no heartbeat
        self.stop_watchdog()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.pid_path)
        log("nothing left to supervise: exiting")

    def live_for(self, owner: int) -> None:
        """Stop every service and exit once process ``owner`` is gone (already, or later)."""
        try:
            fd = os.pidfd_open(owner)
        except OSError:  # gone before this daemon could look: nobody to serve
            self.owner_gone(owner)
            return

        def gone() -> None:
            self.loop.remove_reader(fd)
            os.close(fd)
            self.owner_gone(owner)

        self.loop.add_reader(fd, gone)

    def owner_gone(self, owner: int) -> None:
        log(f"pid {owner}, which this supervisor serves, is gone: stopping every service")
        self.stop_all(lambda: setattr(self, "exiting", True))

    def on_signal_bytes(self, fd: int) -> None:
        try:
            data = os.read(fd, 512)
        except BlockingIOError:
            return
        for signum in data:
            if signum == signal.SIGHUP:
                self.sinks.reopen_all()
                _log.reopen()  # its own log too: logrotate moved it aside, then sent SIGHUP
                log("SIGHUP: log files reopened")
            elif signum in (signal.SIGTERM, signal.SIGINT):
                log(f"{signal.Signals(signum).name}: stopping every service")
                self.stop_all(lambda: setattr(self, "exiting", True))

    # ---- operations (the server's dispatch table)

    def op_ping(self, request: dict[str, Any], done: Reply) -> None:
        done({"ok": True, "pid": os.getpid(), "run_dir": self.run_dir})

    def op_modules(self, request: dict[str, Any], done: Reply) -> None:
        """Diagnostics: every module this daemon has loaded (a test guards the list)."""
        done({"ok": True, "modules": sorted(sys.modules)})

    def op_status(self, request: dict[str, Any], done: Reply) -> None:
        names = request.get("names")
        if names is None:
            names = list(dict.fromkeys([*self.past, *self.units]))
        done({"ok": True, "statuses": [self.status_of(str(n)).to_wire() for n in names]})

    def op_textfile(self, request: dict[str, Any], done: Reply) -> None:
        """Write noderole.prom now and after every later state change (_textfile)."""
        self.textfile.configure(_textfile.target_from_wire(request))
        done({"ok": True, "written": self.textfile.last_error == ""})

    def op_start(self, request: dict[str, Any], done: Reply) -> None:
        spec = ProcessSpec.from_wire(request["spec"])
        self.start(spec, bool(request.get("wait_ready")), False, done)

    def op_restart(self, request: dict[str, Any], done: Reply) -> None:
        spec = ProcessSpec.from_wire(request["spec"])
        self.start(spec, bool(request.get("wait_ready")), True, done)

    def op_stop(self, request: dict[str, Any], done: Reply) -> None:
        """Stop ``names`` one after another, or, given ``waves`` (lists of names that depend on
        none of each other, in stop order), each wave's services together: a wave ends when its
        slowest service is gone, so a stop takes one ``stop_timeout`` per wave, not one per
        service that ignores its stop signal."""
        names = request["names"]
        if not isinstance(names, list):
            raise TypeError(f"names must be a list, got {names!r}")
        waves = request.get("waves")
        if waves is not None and not (
            isinstance(waves, list)
            and all(isinstance(w, list) and all(isinstance(n, str) for n in w) for w in waves)
        ):
            raise TypeError(f"waves must be a list of lists of names, got {waves!r}")
        if waves is None:
            groups = [[str(n)] for n in names]
        else:
            # Each name once; a name asked for that no wave holds is stopped last, alone.
            seen: set[str] = set()
            groups = []
            for wave in waves:
                group = [n for n in dict.fromkeys(wave) if n not in seen]
                seen.update(group)
                if group:
                    groups.append(group)
            groups += [[str(n)] for n in dict.fromkeys(names) if str(n) not in seen]
        results: list[dict[str, Any]] = []

        def next_wave() -> None:
            # A loop, not a chain of calls: waves that finish at once must not recurse once per
            # wave; a wave that waits for its processes resumes the loop when it is done.
            while groups:
                units = []
                for name in groups.pop(0):
                    unit = self.units.get(name)
                    if unit is None:
                        results.append(self.status_of(name).to_wire())
                    else:
                        units.append(unit)
                left, looping = [len(units)], [True]

                def stopper(unit: Unit, left: list[int], looping: list[bool]) -> Callable[[], None]:
                    def stopped() -> None:
                        results.append(unit.status().to_wire())
                        left[0] -= 1
                        if left[0] == 0 and not looping[0]:
                            next_wave()

                    return stopped

                for unit in units:
                    unit.stop(stopper(unit, left, looping))
                looping[0] = False
                if left[0]:
                    return
            answer: dict[str, Any] = {"ok": True, "statuses": results}
            if self.killed_leftovers:
                answer["killed_leftovers"] = self.killed_leftovers
                self.killed_leftovers = {}
            # Once the state file says so: a reader of it never sees a state older than an
            # answer already given (a client reads it when this daemon does not answer).
            self.after_flush(lambda: done(answer))

        next_wave()

    def op_shutdown(self, request: dict[str, Any], done: Reply) -> None:
        def all_stopped() -> None:
            self.exiting = True
            done({"ok": True, "statuses": []})

        self.stop_all(all_stopped)

    def status_of(self, name: str) -> ServiceStatus:
        if name in self.units:
            return self.units[name].status()
        return self.past.get(name) or ServiceStatus(name=name, reason="not supervised")

    def start(self, spec: ProcessSpec, wait_ready: bool, force: bool, done: Reply) -> None:
        old = self.units.get(spec.name)
        if old is not None and old.stopping:
            old.stop_waiters.append(lambda: self.start(spec, wait_ready, force, done))
            return
        if old is not None and old.active:
            waiting = old.state == "backoff"  # exited, its respawn delay running: not running
            if old.spec.fingerprint == spec.fingerprint and not force and not waiting:
                status = old.status().but(already_running=True).to_wire()
                self.after_flush(lambda: done({"ok": True, "statuses": [status]}))
                return
            # A unit waiting to respawn is started now, as systemctl start does one in
            # auto-restart: its old group is ended first, as at any restart.
            if force:
                why = "restarted"
            elif old.spec.fingerprint != spec.fingerprint:
                why = "replaced: its definition changed"
            else:
                why = f"started at once: it was waiting to respawn ({old.last_exit or 'exited'})"
            old.stop(lambda: self.start_new(spec, wait_ready, why, done))
            return
        self.start_new(spec, wait_ready, "", done)

    def start_new(self, spec: ProcessSpec, wait_ready: bool, why: str, done: Reply) -> None:
        named = self.judge_pidfile(spec)
        if named is not None and not named[1]:
            self.refuse(spec, named[0], done)
            return
        unit = Unit(spec, self)
        self.units[unit.name] = unit
        self.past.pop(unit.name, None)
        self.ever_supervised = True
        if named is not None:
            pid, why_stale = named
            log(f"{unit.name}: stale pidfile {spec.pidfile} names {pid}, {why_stale}: replacing it")
        unit.spawn(first=True, check_after_write=not wait_ready)
        if why and unit.active:
            unit.reason = why

        def answer() -> None:
            done({"ok": True, "statuses": [unit.status().to_wire()]})

        if wait_ready and unit.state == "running" and unit.check is not None:
            unit.ready_waiters.append(lambda: self.after_flush(answer))
        else:
            self.after_flush(answer)

    def judge_pidfile(self, spec: ProcessSpec) -> tuple[int, str] | None:
        """The pid in ``spec``'s pidfile and why it is stale; None when there is none to read.

        The reason is empty when that pid may be what a killed supervisor left of the service:
        a supervisor killed with its watchdog (and its state lost) leaves the service running
        with nobody supervising it, and starting it again would run two copies; the start is
        then refused (:meth:`refuse`). What is known beats what is guessed:

        - the pid of a process this daemon started (any service's): ours, not left by anyone;
        - a service this daemon has started before: a killed predecessor's copy ran before
          this daemon did, so that first start was refused had the pidfile named it (and
          overwrote the pidfile otherwise), and none can appear since (a killed supervisor
          starts nothing). So no pid its pidfile names now is a leftover: the record wins over
          the guess below, which a stranger in a session of its own would fool;
        - otherwise (a first start, with nothing recorded of the process) the pid must name a
          running process that leads a session of its own, as every service a supervisor starts
          does (``setsid``: its session id is its pid, for its whole life), and that runs the
          service's program (:func:`_runs_program`). A process in another session (a shell's
          child, a program the service started) or of another program is no leftover.

        A predecessor's recorded processes are not looked for here: :meth:`recover` killed them
        (by pid and start time) and removed their pidfiles before this daemon served. Nor is the
        pidfile's time compared with the process's start: a clock stepped forward after the
        write (NTP on a board without a real-time clock) would make a leftover look younger
        than its pidfile, and start a second copy beside it.
        """
        if not spec.pidfile:
            return None
        try:
            # Never a plain open(): a FIFO or link planted at the pidfile must not hang the
            # daemon nor lead it out of the service's directory.
            pid = int(_safeopen.read_small(spec.pidfile, 64).split()[0])
        except (OSError, ValueError, IndexError):
            return None
        if pid <= 0:
            return pid, "no process"
        if pid == 1:
            return pid, "the init process"
        if pid == os.getpid():
            return pid, "this supervisor itself"
        owner = next((u.name for u in self.units.values() if u.pid == pid), None)
        if owner is not None:
            return pid, f"the process this supervisor runs for {owner}"
        st = _proc.proc_stat(pid)
        if st is None or not st.running:
            return pid, "no process"
        if spec.name in self.units:
            return pid, (
                f"a running process but no killed supervisor's copy of {spec.name}: this "
                f"supervisor started {spec.name} itself before"
            )
        if st.session != pid:
            return pid, (
                f"a running process that leads no session of its own (session {st.session}), "
                "as every service a supervisor starts does: no killed supervisor's copy"
            )
        if not _runs_program(pid, spec.argv):
            return pid, "a running process of another program"
        return pid, ""

    def refuse(self, spec: ProcessSpec, pid: int, done: Reply) -> None:
        """Answer a start that would duplicate a running process that is not ours (``pid``)."""
        reason = (
            f"refusing to start: its pidfile {spec.pidfile} names pid {pid}, a running "
            f"{os.path.basename(spec.argv[0])} in a session of its own (as a supervisor starts a "
            "service) that this supervisor did not start (left by a killed supervisor?); stop "
            f"pid {pid}, or remove {spec.pidfile} if it is no copy of {spec.name}, then apply again"
        )
        log(f"{spec.name}: {reason}")
        self.units.pop(spec.name, None)
        status = ServiceStatus(
            name=spec.name,
            state="crashed",
            log=spec.log,
            pidfile=spec.pidfile,
            fingerprint=spec.fingerprint,
            reason=reason,
        )
        self.past[spec.name] = status
        self.persist()
        self.after_flush(lambda: done({"ok": True, "statuses": [status.to_wire()]}))

    def stop_all(self, then: Callable[[], None]) -> None:
        units = [u for u in self.units.values() if u.active]
        left = [len(units)]
        if not units:
            then()
            return

        def one_done() -> None:
            left[0] -= 1
            if left[0] == 0:
                then()

        for unit in units:
            unit.stop(one_done)


# --------------------------------------------------------------------------- entry point


def _runs_program(pid: int, argv: tuple[str, ...]) -> bool:
    """``pid`` runs ``argv`` (same command line, or the same executable file)."""
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = [w.decode(errors="replace") for w in f.read().split(b"\0")[:-1]]
        if words == list(argv):
            return True
    with contextlib.suppress(OSError):
        exe = os.stat(f"/proc/{pid}/exe")
        program = os.stat(argv[0])
        return (exe.st_dev, exe.st_ino) == (program.st_dev, program.st_ino)
    return False


def _claim(run_dir: str, timeout: float) -> socket.socket | str | tuple[int, int]:
    """Bind the node's abstract name (held for life); or why not, naming the holder.

    Waits up to ``timeout`` for a predecessor that is just exiting (it holds the name to its
    last breath, so that it never writes its state over its successor's). A holder that is
    neither root nor this daemon's user is no supervisor of this node but a local user who took
    the name first (abstract names have no file mode, and are listed in ``/proc/net/unix`` for
    anyone to copy): its ``(pid, uid)`` is returned at once, and the daemon serves its socket
    file alone, its run directory's lock keeping the node to one daemon.
    """
    address = _protocol.abstract_address(run_dir)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock.bind(address)
            sock.listen(BACKLOG)
            return sock
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                sock.close()
                raise
        holder = _protocol.listener(address)
        if holder is not None and not _protocol.trusted(holder[1]):
            sock.close()
            return holder
        if time.monotonic() >= deadline:
            sock.close()
            named = f" (pid {holder[0]}, uid {holder[1]})" if holder else ""
            return f"another supervisor serves this node root{named}"
        time.sleep(0.01)


def _lock(run_dir: str, timeout: float) -> int | None:
    """Take the daemon lock (held for life); None if another daemon holds it past ``timeout``."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(os.path.join(run_dir, _protocol.LOCK_NAME), flags, 0o600)
    os.fchmod(fd, 0o600)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            # Usually a predecessor that is just exiting: it answers "retry" and lets go soon.
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.01)


def _settle_standby(keep: int) -> None:
    """What subprocess would have done in the child: the client spawns a standby with
    :func:`os.posix_spawn` (no close_fds, no cwd), so close every descriptor but stdio and
    ``keep`` (a caller's inheritable descriptor, a pipe its own parent reads to the end, must
    not live on in a daemon) and leave the caller's working directory.

    The open descriptors are listed, not every number up to the limit tried: without the
    close_range system call (kernels before 5.9) ``os.closerange`` closes one number at a time,
    and a container's limit can be a billion.
    """
    try:
        fds: Iterable[int] = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: the usual limits
        fds = range(3, min(os.sysconf("SC_OPEN_MAX"), 1 << 16))
    for fd in fds:
        if fd > 2 and fd != keep:
            with contextlib.suppress(OSError):  # the listing's own, closed since
                os.close(fd)
    os.chdir("/")


def _await_go(fd: int) -> str | None:
    """A standby daemon (``RUN_DIR FD standby``): its interpreter and imports are done ahead of
    need; wait on the socket ``fd`` for the client's go, which carries the log to write to: its
    descriptor, and its path after ``go\n`` (returned; empty when the log is no file).

    None when the client closed the socket instead (nothing needed a daemon after all): nothing
    has been touched yet, so the standby simply exits.
    """
    with socket.socket(fileno=os.dup(fd)) as channel:
        try:
            message, fds, _, _ = socket.recv_fds(channel, _GO_MAX, 1)
        except OSError:
            return None
    if not message.startswith(b"go\n") or len(fds) != 1:
        for extra in fds:
            os.close(extra)
        return None
    # From here on, as a daemon spawned directly: stdout and stderr are the supervisor's log.
    os.dup2(fds[0], 1)
    os.dup2(fds[0], 2)
    os.close(fds[0])
    return os.fsdecode(message[3:])


_GO_MAX = 3 + 65536
"""The go's bytes at most: ``go\n`` and a path."""


def _refusal(error: OSError) -> str:
    from noderole.supervisor._proclimit import refusal  # only once something was refused

    return refusal(error)


def main(argv: list[str]) -> int:
    """``RUN_DIR READY_FD [standby] [owner=PID] [log=PATH]``: detach, lock, recover, listen,
    report ready, serve.

    With ``standby``, ``READY_FD`` is a socket on which the client's go (and the log) arrives
    first (:func:`_await_go`); the ready message goes back on the same socket. With ``owner``,
    the daemon stops every service and exits once process PID is gone (a rehearsal's). ``log``:
    the path of the log on stdout and stderr, which every line goes to (:func:`_log.set_path`);
    without it, the log is no file (``/dev/null``).
    """
    run_dir, ready_fd, options = argv[0], int(argv[1]), argv[2:]
    owner = next((int(o.partition("=")[2]) for o in options if o.startswith("owner=")), None)
    log_path = next((o.partition("=")[2] for o in options if o.startswith("log=")), "")
    if "standby" in options:
        _settle_standby(ready_fd)
        go = _await_go(ready_fd)
        if go is None:
            return 0
        log_path = go
    _log.set_path(log_path or None)
    _log.set_fallback(os.path.join(os.path.abspath(run_dir), "supervisor.log"))
    # Second fork: the session leader (the client's child) exits at once; the daemon, not a
    # session leader, can never acquire a controlling terminal.
    try:
        forked = os.fork()
    except OSError as e:
        why = f"start-up failed: cannot fork the daemon: {_refusal(e)}"
        log(why)
        with contextlib.suppress(OSError):
            os.write(ready_fd, why.encode() + b"\n")
        return 1
    if forked > 0:
        os._exit(0)
    # The node's "/": the machine's for a real node, the scratch root under --root, where the
    # services' default working directory is too (they are then started without Popen).
    try:
        os.chdir(_protocol.anchor_path(run_dir))
    except OSError:
        os.chdir("/")
    os.umask(0o022)
    # Children are reaped by this daemon alone, never by the kernel (as an inherited SIGCHLD
    # ignore would have it): a child not reaped yet keeps its pid, and so its process group's
    # number, from being reused, which is what lets the daemon signal that group (_unit).
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # A pidfd, a pipe and a log file for each service: past the usual soft limit (1,024) within
    # a few hundred services. The services themselves get the limit given (see _fdlimit).
    _fdlimit.raise_limit()
    _title.set_title(_title.title_words(NAME, run_dir))

    def ready(message: str) -> bool:
        """Tell the launcher; False when it no longer listens (interrupted, it gave up)."""
        try:
            os.write(ready_fd, message.encode() + b"\n")
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.close(ready_fd)
        return True

    # The abstract name first: it is what no file deletion can undo (a run dir removed and made
    # again has a fresh lock file that any newcomer could take).
    try:
        claim = _claim(run_dir, KILL_GRACE)
    except OSError as e:
        ready(f"start-up failed: cannot bind the supervisor's abstract socket: {e}")
        return 1
    if isinstance(claim, str):
        ready(claim)
        return 1
    abstract = claim if isinstance(claim, socket.socket) else None
    squatter = claim if isinstance(claim, tuple) else None
    try:
        _safeopen.private_dir(run_dir)  # 0700, whoever made it first
        lock = _lock(run_dir, KILL_GRACE)
    except OSError as e:
        if abstract is not None:
            abstract.close()
        ready(f"cannot use {run_dir}: {e}")
        return 1
    if lock is None:
        ready(f"another supervisor holds {os.path.join(run_dir, _protocol.LOCK_NAME)}")
        return 1
    if squatter is not None:
        pid, uid = squatter
        log(
            f"the supervisor's abstract socket name is taken by pid {pid} (uid {uid}), which is "
            f"not a supervisor of this node: serving {_protocol.SOCKET_NAME} in {run_dir} only "
            "(its lock keeps the node to one supervisor); stop that process"
        )
    daemon = Daemon(run_dir, abstract)
    daemon.lock_fd = lock
    try:
        daemon.recover()
        daemon.write_pid()
        daemon.server.listen()
        daemon.persist()
        daemon.flush()
        daemon.start_watchdog()
    except OSError as e:
        # The machine refused (a full /run, a planted link, no process for the watchdog): say
        # so, no traceback.
        daemon.server.close()
        why = _refusal(e)
        log(f"start-up failed: {why}")
        ready(f"start-up failed: {why}")
        return 1
    except Exception as e:
        ready(f"start-up failed: {type(e).__name__}: {e}")
        raise
    r, w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    for signum in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    daemon.loop.add_reader(r, lambda: daemon.on_signal_bytes(r))
    daemon.loop.call_later(RUN_DIR_CHECK, daemon.check_run_dir)
    if owner is not None:
        daemon.live_for(owner)
    log(f"supervising from {run_dir}")
    if not ready("ok"):
        # Nobody waits for this daemon (a rehearsal cut short by Ctrl-C or SIGTERM while it
        # started): with nothing to supervise it goes at once, not after STARTUP_GRACE.
        log("the noderole that started this supervisor gave up waiting for it")
        daemon.unwanted = True
    daemon.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
