"""One supervised service: its spec, its current process, and the state machine between them.

States (:data:`noderole.supervisor._status.STATES`)::

    start -> running --(readiness passes)--> ready
    running/ready --(exits)--> backoff --(delay)--> running      (respawn)
                           \\-> crashed                           (respawn limit reached)
    any --(stop)--> stopping... -> stopped

A process that exits takes its session with it: SIGKILL to its process group at once, then to
every other group of its session (what moved to a group of its own: ``timeout``, a shell's
jobs), before the respawn, until none is left (:mod:`._sessions`): a leftover grandchild would
hold the port the respawned process needs, and one that escaped the group ran on, a copy more at
every respawn. A stop signals the same groups. Only a process that called setsid (a containerd
shim) is not followed. A service whose stop scope is ``"process"`` (k3s, whose containers must
outlive it) has its process alone signalled, on stop and on exit; what it started runs on.
Standard library only.

A session and its leader's group are signalled by their number only while the unit's process is
not yet reaped: until then its pid, and so the number of the session and the group it leads,
cannot be given to another process. So the process that exited is reaped only once its session
is empty (or survived SIGKILL for :data:`KILL_GRACE`), a stop keeps the exited process unreaped
(a zombie) until then, and a unit waiting to respawn (backoff), its process reaped, signals
nothing: by then the number may lead anyone's group.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable

from noderole.supervisor import _child, _fdlimit, _pidfile, _proc
from noderole.supervisor._log import log, log_limited
from noderole.supervisor._loop import Loop, Timer
from noderole.supervisor._policy import RespawnPolicy
from noderole.supervisor._readiness import INTERVAL, ReadinessCheck
from noderole.supervisor._sessions import Sessions
from noderole.supervisor._sinks import Sinks
from noderole.supervisor._spec import ProcessSpec
from noderole.supervisor._status import ACTIVE, STOPPING, ServiceState, ServiceStatus

TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
if TYPE_CHECKING:
    from typing import Protocol
else:
    Protocol = object  # Host is a structural type for the checker; a plain class at run time

__all__ = ["GROUP_POLL", "GROUP_POLL_MAX", "GROUP_WATCH", "KILL_GRACE", "Host", "Unit"]

KILL_GRACE = 5.0
"""Seconds to wait for a session to empty after SIGKILL before reporting survivors."""
GROUP_POLL = 0.01
"""Seconds before the second look at a stopping session (and after a SIGKILL to it); each later
pause is twice the one before, up to :data:`GROUP_POLL_MAX`."""
GROUP_POLL_MAX = 0.25
"""The longest pause between two looks at a stopping session. Once its leader has exited, a look
lists ``/proc`` (a millisecond a thousand processes, tens of ms when it read every stat file):
every 10 ms for a member that ignores the stop signal was a third of a core for the whole
``stop_timeout``."""
GROUP_WATCH = 16
"""Members of a stopping session watched through a pidfd, at most: the exit of one prompts the
next look at once, so the stop ends as soon as the session is empty, without waiting for a
look."""


class Host(Protocol):
    """What a unit needs from the daemon."""

    loop: Loop
    sinks: Sinks
    sessions: Sessions

    def persist(self) -> None:
        """The state changed: write the state file soon."""

    def record_group(self, name: str, pgid: int | None, ticks: int | None) -> bool:
        """Tell the watchdog which group ``name`` runs as; False if it could not be told."""

    def node_root_present(self) -> bool:
        """False once the node root is gone (the host then stops every unit and exits)."""

    def after_flush(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the state file records what is true now (or at once)."""


class Unit:
    """One service: its spec, its current process, its counters and its state."""

    def __init__(self, spec: ProcessSpec, host: Host) -> None:
        self.spec = spec
        self.host = host
        sup = spec.supervision
        self.policy = RespawnPolicy(
            respawn_delay=sup.respawn_delay,
            respawn_max=sup.respawn_max,
            respawn_period=sup.respawn_period,
            backoff_max=sup.backoff_max,
        )
        self.state: ServiceState = "starting"
        self.reason = ""
        self.popen: _child.Child | subprocess.Popen[bytes] | None = None
        self.pidfd: int | None = None
        self.pid: int | None = None
        self.start_ticks: int | None = None
        self.started_at: float | None = None
        self.started_mono = 0.0
        self.restarts = 0
        self.last_exit: str | None = None
        self.timer: Timer | None = None
        self.stopping = False
        self.stop_waiters: list[Callable[[], None]] = []
        self.stop_poll: Callable[[], None] | None = None
        """While stopping: look at the session now (the leader's exit calls it)."""
        self.exited_ns: int | None = None
        """Since when (monotonic ns) the process is known to have exited, unreaped: a listing
        of its session taken later shows every member it will ever have."""
        self.sweeping = False
        """The process exited and is kept unreaped while the rest of its session is ended."""
        self.ready_waiters: list[Callable[[], None]] = []
        self.check: ReadinessCheck | None = None
        self.check_deadline = 0.0
        self._status_key: tuple[object, ...] = ()
        self._status = ServiceStatus(name=spec.name)  # replaced at the first status()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def active(self) -> bool:
        return self.state in ACTIVE or self.stopping

    def status(self) -> ServiceStatus:
        """What the state file and a status response say about this service.

        The same object while nothing it shows has changed: the daemon writes the state file
        after every batch of changes, every service's status in it, and a crash-looping node
        changes one or two services a batch (the state file's encoder reuses an unchanged
        status's JSON by its identity).
        """
        key = (
            self.state,
            self.pid,
            self.start_ticks,
            self.started_at,
            self.restarts,
            self.last_exit,
            self.reason,
            self.spec,
        )
        if key != self._status_key:
            spec = self.spec
            self._status = ServiceStatus(
                name=spec.name,
                state=self.state,
                pid=self.pid,
                start_ticks=self.start_ticks,
                started_at=self.started_at,
                restarts=self.restarts,
                last_exit=self.last_exit,
                log=spec.log,
                pidfile=spec.pidfile,
                fingerprint=spec.fingerprint,
                reason=self.reason,
            )
            self._status_key = key
        return self._status

    # ---- starting

    def spawn(self, *, first: bool = False, check_after_write: bool = False) -> None:
        """Start the process; on failure, count it as an exit (or fail the first start).

        With ``check_after_write`` (a start whose answer waits for the state write, not for
        readiness), the first readiness attempt is made on the loop's turn after that write.
        """
        spec, sinks = self.spec, self.host.sinks
        write_fds: list[int] = []
        try:
            uid, gid = _child.ids(spec.user, spec.group)
            out_fd = sinks.output(
                spec.stdout_log, spec.log_max_bytes, uid=uid, gid=gid, name=self.name
            )
            write_fds.append(out_fd)
            if spec.stderr_log and spec.stderr_log == spec.stdout_log:
                err_fd = out_fd
            else:
                err_fd = sinks.output(
                    spec.stderr_log, spec.log_max_bytes, uid=uid, gid=gid, name=self.name
                )
                write_fds.append(err_fd)
            popen = _child.spawn(
                argv=spec.argv,
                environment=spec.environment,
                cwd=spec.cwd,
                user=spec.user,
                group=spec.group,
                stdout=out_fd,
                stderr=err_fd,
                open_files=spec.supervision.open_files,
                name=self.name,
            )
        except (_child.SpawnError, OSError) as e:
            reason = str(e) if isinstance(e, _child.SpawnError) else f"cannot start: {e}"
            self._spawn_failed(reason, first)
            return
        finally:
            # The child has its copies; the pipes' read ends live on in the loop.
            for fd in write_fds:
                os.close(fd)
        try:
            pidfd = _fdlimit.keep(os.pidfd_open(popen.pid))
        except OSError as e:
            # Without a pidfd its exit would go unseen: undo the start.
            self._undo(popen, f"cannot start: {e}", first)
            return
        st = _proc.proc_stat(popen.pid)
        ticks = st.start_ticks if st else None
        if ticks is not None and not self.host.record_group(self.name, popen.pid, ticks):
            # Neither known to the watchdog nor (perhaps) to the state file: a daemon kill -9
            # would orphan it, and the next start would run a duplicate. Undo the start.
            os.close(pidfd)
            self._undo(popen, "cannot tell the watchdog about the new process: undone", first)
            return
        self.popen = popen
        self.pid = popen.pid
        self.start_ticks = ticks
        self.exited_ns = None
        self.started_at = time.time()
        self.started_mono = time.monotonic()
        self.state = "running"
        self.reason = ""
        self.pidfd = pidfd
        self.host.loop.add_reader(pidfd, self.on_exit)
        _pidfile.write(self.name, spec.pidfile, popen.pid)
        self.host.persist()
        if spec.readiness is not None:
            check = ReadinessCheck(spec.readiness.probe, spec.environment)
            self.check = check
            self.check_deadline = time.monotonic() + spec.readiness.timeout
            if check_after_write:
                # An attempt may import on first use (an https probe imports ssl, milliseconds
                # holding the GIL), which would hold up the state write and so the answer the
                # client (apply) waits for. A respawn, which no client waits for, and a start
                # answered once ready look at once, as before.
                self.host.after_flush(lambda: self._first_check(check))
            else:
                self._check_tick()

    def _first_check(self, check: ReadinessCheck) -> None:
        if self.check is check:
            self.timer = self.host.loop.call_later(0.0, self._check_tick)

    def _undo(
        self, popen: _child.Child | subprocess.Popen[bytes], reason: str, first: bool
    ) -> None:
        _proc.kill_group(popen.pid, signal.SIGKILL)
        if self.spec.supervision.whole_group:  # unreaped: the session's number is still its own
            members = _proc.session_members(popen.pid)
            _proc.signal_groups(members, signal.SIGKILL, skip=(popen.pid,))
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=KILL_GRACE)
        self._spawn_failed(reason, first)

    def _spawn_failed(self, reason: str, first: bool) -> None:
        log_limited(self.name, f"{self.name}: {reason}")
        if first:
            self.state = "crashed"
            self.reason = reason
            self.host.persist()
            self._finish_waiters()
        else:
            self.last_exit = reason
            self._after_exit(ran_for=0.0)

    def _check_tick(self) -> None:
        check = self.check
        if check is None or self.state != "running" or self.stopping:
            return
        left = self.check_deadline - time.monotonic()
        if check.poll(left):
            self._end_check()
            self.state = "ready"
            self.reason = ""
            self.host.persist()
            self._finish_ready_waiters()
            return
        if left <= 0:
            self._end_check()
            assert self.spec.readiness is not None
            lacking = ", ".join(check.last_missing)
            self.reason = f"not ready after {self.spec.readiness.timeout:g}s" + (
                f": {lacking}" if lacking else ""
            )
            self.host.persist()
            self._finish_ready_waiters()
            return
        self.timer = self.host.loop.call_later(min(INTERVAL, left), self._check_tick)

    def _end_check(self) -> None:
        if self.check is not None:
            self.check.close()
            self.check = None

    def _finish_ready_waiters(self) -> None:
        waiters, self.ready_waiters = self.ready_waiters, []
        for waiter in waiters:
            waiter()

    def _finish_waiters(self) -> None:
        self._finish_ready_waiters()
        waiters, self.stop_waiters = self.stop_waiters, []
        for waiter in waiters:
            waiter()

    # ---- exits and respawns

    def _reap(self) -> int | None:
        """Collect the child's exit status if it has exited (never blocks)."""
        if self.popen is None:
            return None
        code = self.popen.poll()
        if code is None:
            return None
        if self.pidfd is not None:
            self.host.loop.remove_reader(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = None
        self.last_exit = _proc.describe_status(code)
        self.popen = None
        return code

    def _leader(self) -> str:
        """Where the unit's process is, without reaping it: ``"running"``; ``"exited"`` (a
        zombie, not reaped: its pid, and so its group's number, cannot be reused yet); or
        ``"gone"`` (none, or reaped: the number may be anyone's now)."""
        popen = self.popen
        if popen is None or popen.returncode is not None:
            return "gone"
        try:
            exited = os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped behind our back (SIGCHLD ignored)
            return "gone"
        return "running" if exited is None else "exited"

    def _unwatch(self) -> None:
        """Stop waiting on the pidfd (it stays readable while the zombie is kept)."""
        if self.pidfd is not None:
            self.host.loop.remove_reader(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = None

    def on_exit(self) -> None:
        """The pidfd is readable: the process exited."""
        if self.popen is None:
            return  # reaped already (an event of the same batch)
        leader = self._leader()
        if leader == "running":
            return
        if self.exited_ns is None:
            self.exited_ns = self.host.loop.woke_ns  # its exit woke this turn of the loop
        self._end_check()
        if self.stopping:
            # Not reaped yet: the stop's poll reaps it once the session is empty, so that the
            # number cannot be reused while the stop may still signal it.
            self._unwatch()
            if self.stop_poll is not None:
                self.stop_poll()  # at once: no wait for the next tick (a stop of 1,000 in a row)
            return
        if self.timer is not None:
            self.timer.cancel()
        pgid = self.pid
        ran_for = time.monotonic() - self.started_mono
        if pgid is not None and leader == "exited" and self.spec.supervision.whole_group:
            # Before the reap: the zombie keeps the number ours. Its group at once; the rest of
            # its session (what moved to a group of its own) by a look at /proc shared with the
            # other exits of this turn, still before the reap. Processes meant to outlive it
            # (containerd shims) leave the session with setsid.
            _proc.kill_group(pgid, signal.SIGKILL)
            self._unwatch()
            self.sweeping = True
            self.host.sessions.watch(pgid)
            exited_at = time.monotonic()
            self.host.sessions.soon(self, lambda: self._sweep(pgid, ran_for, exited_at, []))
            return
        self._exited(ran_for, 0.0)

    def _sweep(self, pgid: int, ran_for: float, exited_at: float, escaped: list[int]) -> None:
        """After the exit, before the reap: SIGKILL what is left of the session, and look again
        (with the other exits' looks) until nothing is, or :data:`KILL_GRACE` has passed."""
        if not self.sweeping or self.pid != pgid:
            return  # a stop took over
        sessions = self.host.sessions
        members = sessions.look(pgid, after_ns=self.exited_ns or 0)
        if members and time.monotonic() < exited_at + KILL_GRACE:
            _proc.kill_group(pgid, signal.SIGKILL)  # one may have moved back into it
            _proc.signal_groups(members, signal.SIGKILL, skip=(pgid,))
            escaped.extend(m.pid for m in members if m.pgrp != pgid and m.pid not in escaped)
            sessions.soon(self, lambda: self._sweep(pgid, ran_for, exited_at, escaped))
            return
        self.sweeping = False
        sessions.forget(pgid)
        if escaped:
            log_limited(
                self.name,
                f"{self.name}: killed processes that had left its process group: "
                + " ".join(map(str, escaped)),
            )
        if members:
            survivors = " ".join(str(m.pid) for m in members)
            log_limited(self.name, f"{self.name}: processes survived SIGKILL: {survivors}")
        self._exited(ran_for, time.monotonic() - exited_at)

    def _exited(self, ran_for: float, swept_for: float) -> None:
        """The process exited (``swept_for`` seconds ago, its session ended since): reap it,
        and respawn it or give up."""
        pgid = self.pid
        self._reap()
        self.host.record_group(self.name, None, None)
        self._after_exit(ran_for, swept_for)
        # Logged after the respawn so that the write is not part of the respawn latency.
        # Rate-limited per service: a crash loop must not push older evidence out of the log.
        log_limited(
            self.name, f"{self.name}: pid {pgid} exited ({self.last_exit}) after {ran_for:.3f}s"
        )

    def _after_exit(self, ran_for: float, swept_for: float = 0.0) -> None:
        delay = self.policy.on_exit(time.monotonic(), ran_for)
        if delay is None:
            _pidfile.remove(self.spec.pidfile, self.pid)
            self.state = "crashed"
            n = self.policy.respawn_max
            period = self.policy.respawn_period
            within = f" within {period:g}s" if period is not None else ""
            self.reason = f"gave up after {n} respawn{'s' if n != 1 else ''}{within}"
            self.pid = self.start_ticks = None
            self.started_at = None
            log(f"{self.name}: {self.reason} (last: {self.last_exit})")
            self.host.persist()
            self._finish_waiters()
            return
        # The delay counts from the exit: the look at its session (a few ms) is part of it.
        delay = max(0.0, delay - swept_for)
        self.state = "backoff"
        self.reason = f"respawn in {delay:g}s"
        self._finish_ready_waiters()
        if delay <= 0:
            self._respawn()  # persists once the new child runs: one write, not two
        else:
            self.host.persist()
            self.timer = self.host.loop.call_later(delay, self._respawn)

    def _respawn(self) -> None:
        if self.stopping or self.state != "backoff":
            return  # a stop came first: never start a new child (openrc#375)
        if not self.host.node_root_present():
            return  # its files are gone: no respawn (the host stops every unit)
        self.restarts += 1
        self.spawn()

    # ---- stopping

    def stop(self, then: Callable[[], None]) -> None:
        """stop_signal to every process group of the session, SIGKILL to them after
        stop_timeout, until no process of the session is left (the process alone, and until it
        has exited, when the stop scope is ``"process"``).

        Only while the process is not reaped: a unit waiting to respawn (backoff) has no
        process, and its session was ended when the process exited (:meth:`on_exit`); the
        number it had may by now lead another program's group, which must not be signalled.
        """
        self.stop_waiters.append(then)
        if self.stopping:
            return
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self._end_check()
        if self.popen is not None and self._leader() == "gone":
            self._reap()  # reaped behind our back: its number is no longer known to be ours
        pgid = self.pid if self.popen is not None else None
        if pgid is None:
            self._stopped([])
            return
        self.stopping = True
        self.reason = STOPPING
        sessions = self.host.sessions
        if self.sweeping:  # exited, its session being ended: the stop takes over
            self.sweeping = False
            sessions.cancel(self)
        sup = self.spec.supervision
        whole = sup.whole_group
        kill = _proc.kill_group if whole else _proc.kill_process
        # The process is not reaped (and is not until the session is empty): the number is ours.
        kill(pgid, sup.stop_signum)
        kill(pgid, signal.SIGCONT)  # a stopped (T) process cannot act on SIGTERM
        termed = {pgid}  # groups sent the stop signal; one found later gets it then
        escaped: list[int] = []  # members outside its group, named once in the log

        def term(members: list[_proc.ProcStat]) -> None:
            fresh = [m for m in members if m.pgrp not in termed]
            if not fresh:
                return
            groups = _proc.signal_groups(fresh, sup.stop_signum, skip=termed)
            _proc.signal_groups(fresh, signal.SIGCONT, skip=termed)
            termed.update(groups)
            note(fresh)

        def note(members: list[_proc.ProcStat]) -> None:
            new = [m.pid for m in members if m.pgrp != pgid and m.pid not in escaped]
            if new:
                escaped.extend(new)
                log_limited(
                    self.name,
                    f"{self.name}: stopping processes that left its process group: "
                    + " ".join(map(str, new)),
                )

        if whole:
            sessions.watch(pgid)
            term(sessions.now(pgid))
        kill_at = time.monotonic() + sup.stop_timeout
        give_up_at = kill_at + KILL_GRACE
        killed = [False]
        pause = [GROUP_POLL]
        # Looks taken: a member's pidfd prompts a look only if none was taken since it was
        # opened (several members ending at once make one look, not one each).
        looks = [0]
        watched: list[int] = []

        def unwatch() -> None:
            for fd in watched:
                self.host.loop.remove_reader(fd)
                os.close(fd)
            watched.clear()

        def member_exited(look: int) -> None:
            if look == looks[0]:
                poll()

        def watch(members: list[int]) -> None:
            look = looks[0]
            for pid in members[:GROUP_WATCH]:
                try:
                    fd = _fdlimit.keep(os.pidfd_open(pid))
                except OSError:
                    continue  # gone already, or no descriptor to spare: the next look sees it
                watched.append(fd)
                self.host.loop.add_reader(fd, lambda: member_exited(look))

        def look() -> list[_proc.ProcStat]:
            return sessions.look(pgid, after_ns=self.exited_ns or 0)

        def poll() -> None:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            unwatch()
            looks[0] += 1
            leader = self._leader()
            if leader == "exited":
                self._unwatch()  # readable until reaped: no wake-up from it any more
                if self.exited_ns is None:  # seen here first: a listing from now on is needed
                    self.exited_ns = time.monotonic_ns()
            # While the leader lives there is no need to list the session (a scan of /proc):
            # its exit wakes this poll through on_exit.
            members: list[_proc.ProcStat] = []
            if leader == "running":
                left = [pgid]
            elif leader == "gone" or not whole:
                left = []  # reaped behind our back: the number is no longer known to be ours
            else:
                members = look()
                left = [m.pid for m in members]
            if not left:
                self._reap()  # a zombie (or nothing): reaped at once
                self._stopped([])
                return
            now = time.monotonic()
            if now >= kill_at and not killed[0]:
                killed[0] = True
                log(f"{self.name}: still running {sup.stop_timeout:g}s after stop: SIGKILL")
                kill(pgid, signal.SIGKILL)
                if whole:
                    members = members if leader == "exited" else sessions.now(pgid)
                    _proc.signal_groups(members, signal.SIGKILL, skip=(pgid,))
                    note(members)
                pause[0] = GROUP_POLL  # what SIGKILL reaches is gone within milliseconds
            elif now >= give_up_at:
                self._await_leader(1.0)
                leader = self._leader()
                if leader != "gone" and whole:
                    rest = sessions.look(pgid, after_ns=time.monotonic_ns())
                    left = [pgid] if leader == "running" else []
                    left += [m.pid for m in rest]
                elif leader != "gone":
                    left = [pgid] if leader == "running" else []
                # Reaped only now that the survivors are listed; a leader still running is not
                # (its pidfd stays watched: its exit is still seen).
                self._reap()
                self._stopped(left)
                return
            elif killed[0] and members:
                # Again to what is left: a process may have changed groups since the last one.
                kill(pgid, signal.SIGKILL)
                _proc.signal_groups(members, signal.SIGKILL, skip=(pgid,))
                note(members)
            elif members:
                term(members)  # a group that was not there when the stop began
            if leader == "exited":
                watch(left)  # a member's exit prompts the next look at once
            # Looked at again after a pause that grows while the session lingers, and at the
            # deadline of the next step whatever the pause.
            deadline = give_up_at if killed[0] else kill_at
            delay = min(pause[0], max(0.0, deadline - now))
            pause[0] = min(2 * pause[0], GROUP_POLL_MAX)
            self.timer = self.host.loop.call_later(delay, poll)

        self.stop_poll = poll
        poll()

    def _await_leader(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the process to exit, without reaping it (blocking)."""
        if self.pidfd is not None:
            select.select([self.pidfd], [], [], timeout)

    def _stopped(self, survivors: list[int]) -> None:
        _pidfile.remove(self.spec.pidfile, self.pid)
        if self.pid is not None:
            self.host.sessions.forget(self.pid)
        if not survivors:
            self.host.record_group(self.name, None, None)
        self.stopping = False
        self.stop_poll = None
        self.state = "stopped"
        self.reason = "stopped"
        if survivors:
            self.reason = f"processes survived SIGKILL: {' '.join(map(str, survivors))}"
        self.pid = self.start_ticks = None
        self.started_at = None
        self.host.persist()
        self._finish_waiters()
