"""The client side: :class:`Supervisor`, used by the engine and the CLI.

Every call is one request over the control socket in ``run_dir``. :meth:`Supervisor.ensure_running`
starts the daemon when none answers; it is detached (own session, second fork, stdin from
/dev/null, output to its log) so it outlives ``noderole apply``.
"""

from __future__ import annotations

import _socket  # not socket: its enums and selectors cost `status` ~4 ms (a tenth of its start-up)
import contextlib
import errno
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from noderole.supervisor import _protocol, _safeopen
from noderole.supervisor._status import SchemaError, ServiceStatus

if TYPE_CHECKING:  # `status` and `stop` send no spec: they need not import it (nor its probes)
    import subprocess
    from pathlib import Path

    from noderole.supervisor import _state
    from noderole.supervisor._spec import ProcessSpec

__all__ = ["NotAnswering", "OtherVersion", "Supervisor", "SupervisorError"]

_LAUNCH = _protocol.launch_source("_daemon")

STATUS_HELLO_TIMEOUT = 1.0
"""A status waits this long for the daemon's hello before answering from the state file."""

_START_TIMEOUT = 30.0
"""Seconds to wait for a new daemon to answer (it may first kill a predecessor's leftovers)."""


class SupervisorError(RuntimeError):
    """The supervisor could not be reached or refused a request; ``str()`` says why and where."""


class NotAnswering(SupervisorError):
    """A daemon holds the node but says nothing (stopped with SIGSTOP, or hung): nothing is
    supervised meanwhile (a service that exits is not respawned)."""

    def __init__(self, message: str, *, pid: int | None, short: str) -> None:
        super().__init__(message)
        self.pid = pid
        """The daemon's pid (its connection's peer, else its pid file), None when unknown."""
        self.short = short
        """Who is not answering, in a few words, for each service's reason."""


class OtherVersion(SupervisorError):
    """The daemon speaks another protocol: another version of noderole started it (one from
    before noderole was upgraded on a running node). It goes on supervising its services and
    answers none of this version's requests; :meth:`Supervisor.stop` of every service it runs,
    and :meth:`Supervisor.shutdown`, end it with a signal, the one interface every version has.
    """

    def __init__(self, message: str, *, pid: int, short: str) -> None:
        super().__init__(message)
        self.pid = pid
        """The daemon's pid, as its connection's peer credentials gave it."""
        self.short = short
        """The first clause of the message: who, without the fix."""


class Supervisor:
    """Talks to the node's native supervisor daemon (and starts it when needed).

    ``run_dir`` holds the control socket, the daemon's pid file, its lock and the state file
    (``ROOT/run/noderole``). ``log_path`` receives the daemon's own messages (default
    ``ROOT/var/log/noderole/supervisor.log`` for a ``ROOT/run/noderole`` run dir, so the history
    survives a reboot; else ``run_dir/supervisor.log``). ``timeout`` bounds one request (a stop
    waits for processes). ``warn`` is told about a corrupt state file (default: stderr).
    ``owner``: a daemon this object starts lives no longer than that process (a rehearsal's,
    so that nothing of the scratch root outlives it, even killed): once it is gone, the daemon
    stops every service and exits.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        log_path: str | os.PathLike[str] | None = None,
        timeout: float = 300.0,
        warn: Callable[[str], None] | None = None,
        owner: int | None = None,
    ) -> None:
        # Strings, as pathlib would spell them: a request (``status``) imports no pathlib.
        self._run = _posix(run_dir)
        self._owner = () if owner is None else (f"owner={owner}",)
        """For a daemon this object starts: the process whose end ends it (a rehearsal's)."""
        self._log = _posix(log_path) if log_path is not None else _default_log(self._run)
        self.timeout = timeout
        self.warn = warn if warn is not None else _warn
        self.not_answering: str | None = None
        """Why the daemon is not answering, as the last status (or a caller) found; None once a
        status got an answer. The native backend fails its starts at once while it is set."""
        self.hung: str | None = None
        """Set (who, in a few words) while the last status found the daemon holding the node but
        not answering (stopped or hung: nothing is supervised); None once a status got an answer
        or found no daemon. A daemon of another version sets :attr:`not_answering` only: it
        still supervises its services."""
        self.killed_leftovers: dict[str, list[int]] = {}
        """What the last :meth:`stop` ended of a killed daemon's services (name -> pids), by the
        daemon it started for that: they had survived a daemon killed with its watchdog."""
        self._standby: _Standby | None = None
        self._starting = threading.Lock()
        """Serialises this object's threads that find no daemon (before the starter flock)."""
        self._started = 0
        """Daemons this object has started: a thread that waited for another's start sees it."""
        self._closed = False
        """Set by :meth:`close`: this object starts no daemon any more."""
        self._unheard: _Standby | _Spawned | None = None
        """A daemon whose start an interrupt cut short: it runs, or soon will."""

    @property
    def run_dir(self) -> Path:
        """The run directory (control socket, pid file, locks, state)."""
        from pathlib import Path

        return Path(self._run)

    @property
    def log_path(self) -> Path:
        """The daemon's log."""
        from pathlib import Path

        return Path(self._log)

    @property
    def socket_path(self) -> Path:
        """The control socket."""
        return self.run_dir / _protocol.SOCKET_NAME

    @property
    def pid_path(self) -> Path:
        """The daemon's own pid file."""
        return self.run_dir / _protocol.PID_NAME

    @property
    def state_path(self) -> Path:
        """The state file (JSON; see ``noderole/supervisor/_state.py``)."""
        return self.run_dir / _protocol.STATE_NAME

    # ---- the daemon

    def daemon_pid(self) -> int | None:
        """The running daemon's pid (asked over the socket), or None."""
        answer = self._send({"op": "ping"}, timeout=5.0)
        return int(answer["pid"]) if answer and answer.get("ok") else None

    def ensure_running(self, *, to_shut_down: bool = False) -> None:
        """Start the daemon unless one answers; return once it answers.

        Safe against concurrent callers: a flock serialises starters, and the daemon itself holds
        a lock for life, so a node never has two. After :meth:`close`, only a shutdown's own
        start (``to_shut_down``: a daemon to end the leftovers of a killed one) is made.
        """
        started = self._started
        if self.daemon_pid() is not None:
            return
        # Threads of one apply (one per service) that all find no daemon wait here, not each in
        # turn on the flock and a ping of their own: the first one starts it for all of them.
        with self._starting:
            if self._closed and not to_shut_down:
                raise SupervisorError(f"the native supervisor of {self._run} was shut down")
            if self._started != started:
                return
            self._start_daemon()

    def _start_daemon(self) -> None:
        try:
            # 0700 whoever comes first: no other user may take its locks or read its files.
            _safeopen.private_dir(self._run)
        except OSError as e:
            raise SupervisorError(f"cannot use the run directory {self._run}: {e}") from None
        path = os.path.join(self._run, _protocol.STARTER_LOCK_NAME)
        try:
            lock = os.open(
                path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600
            )
        except OSError as e:
            full = e.errno in (errno.ENOSPC, errno.EDQUOT)
            fix = "free space or inodes on /run (df -h, df -i)" if full else "remove what is there"
            raise SupervisorError(
                f"cannot open the supervisor's start lock {path}: {e.strerror or e}; {fix}, "
                "then run again"
            ) from None
        try:
            _flock(lock, _START_TIMEOUT, "another noderole is starting the supervisor")
            if self.daemon_pid() is None:
                self._spawn_daemon()
            self._started += 1
        finally:
            os.close(lock)

    def prepare(self) -> None:
        """Start a daemon's interpreter now, ahead of need, unless a daemon already runs.

        The standby imports the daemon's modules meanwhile, then waits, touching nothing (no run
        directory, no log, no lock), until :meth:`ensure_running` needs a daemon and tells it to
        go: a caller with other work to do first (``apply`` loading plugins and planning) takes
        the daemon's start-up off its critical path. :meth:`discard` ends an unused standby.
        Never raises: whatever goes wrong here, :meth:`ensure_running` starts a daemon as usual.
        """
        if self._standby is not None or self._holds_name():
            return
        with contextlib.suppress(OSError):
            self._standby = _Standby(self._run, self._owner)

    def discard(self) -> None:
        """End the standby :meth:`prepare` started, if no daemon was needed after all."""
        standby, self._standby = self._standby, None
        if standby is not None:
            standby.discard()

    def _holds_name(self) -> bool:
        """A daemon holds this node's abstract name (it runs, or is exiting). A process of
        another user holding it is none of ours (see :meth:`_connect`)."""
        with contextlib.closing(_stream()) as probe:
            try:
                probe.connect(_protocol.abstract_address(self._run))
                return _protocol.trusted(_protocol.peer_credentials(probe)[1])
            except (ConnectionRefusedError, FileNotFoundError):
                return False
            except OSError:
                return True  # a full backlog, or a name we cannot compute: no standby

    def _spawn_daemon(self) -> None:
        log_fd, log_path = self._open_log()
        standby, self._standby = self._standby, None
        launch: _Standby | _Spawned
        if standby is not None and standby.go(log_fd, log_path):
            os.close(log_fd)
            launch = standby
        else:
            try:
                extra = (*self._owner, f"log={log_path}") if log_path else self._owner
                launch = _spawn(self._run, log_fd, extra)
            except OSError as e:  # no process to be had (a full pids.max), an unusable Python
                from noderole.supervisor._proclimit import refusal

                raise SupervisorError(
                    f"cannot start the native supervisor for {self._run}: {refusal(e)}"
                ) from None
        try:
            message = launch.ready()
        except BaseException:  # Ctrl-C: the daemon starts anyway; close() hears it out
            self._unheard = launch
            raise
        if message == "ok":
            return
        if message.startswith("another supervisor") and self.daemon_pid() is not None:
            return
        raise SupervisorError(
            f"the native supervisor did not start in {self._run}: "
            f"{message or 'it exited without a word'}. Its log: {self._log}"
            f"{_tail(self.log_path)}"
        )

    def _open_log(self) -> tuple[int, str]:
        """The daemon's log, appended to, and its absolute path (the daemon writes every line
        to that path, whatever becomes of the file: :func:`._log.set_path`); when it cannot be
        opened (its file system full or out of inodes at the first boot, something else at its
        path), the run directory's ``supervisor.log`` instead (then ``/dev/null``, and no path),
        and a warning: the log is no reason not to supervise the node's services, nor to leave
        running ones without a stop."""
        try:
            _safeopen.private_dir(os.path.dirname(self._log) or ".")
            return _safeopen.open_append(self._log, mode=0o600), os.path.abspath(self._log)
        except OSError as e:
            why = e
        fallback = os.path.join(self._run, "supervisor.log")
        path = ""
        try:
            if fallback == self._log:
                raise why
            fd = _safeopen.open_append(fallback, mode=0o600)
            path = os.path.abspath(fallback)
            instead = f"it logs to {fallback} meanwhile"
        except OSError:
            fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
            instead = f"nor to {fallback}: it runs without a log"
        self.warn(
            f"cannot open the supervisor log {self._log}: {why.strerror or why}; "
            f"{instead}. {_log_remedy(why)}; the next start of the supervisor writes it again"
        )
        return fd, path

    # ---- requests

    def _connect(self, hello: float) -> _socket.socket | None:
        """A connection to the daemon, or None when none listens.

        The socket file first, then the abstract name (it outlives ``rm -rf`` of the run dir).
        The file sits in the private run directory, where only root can put one; the abstract
        name has no file mode, and a local user may have taken it first (it is listed in
        ``/proc/net/unix`` for anyone to copy): a listener there of another user is passed by,
        as the daemon passes it by (:func:`~._daemon._claim`), whether it answers or not.
        A full listen backlog (``EAGAIN``: many callers at once) is retried with a growing pause
        for up to ``hello`` seconds; past that the daemon is reported as not answering.
        """
        path = os.path.join(self._run, _protocol.SOCKET_NAME)
        addresses = [path]
        with contextlib.suppress(OSError):
            addresses.append(_protocol.abstract_address(self._run))
        deadline = time.monotonic() + hello
        for address in addresses:
            sock = _stream()
            pause = 0.001
            try:
                while True:
                    sock.settimeout(max(0.001, deadline - time.monotonic()))
                    try:
                        _connect_to(sock, address)
                        break
                    except (BlockingIOError, TimeoutError):
                        if address != path and _foreign(_protocol.listener(address)):
                            raise ConnectionRefusedError from None  # not ours: passed by
                        if time.monotonic() >= deadline:
                            raise self._not_answering(None, hello) from None
                        time.sleep(pause)
                        pause = min(pause * 2, 0.05)
            except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
                sock.close()
                continue
            except BaseException:
                sock.close()
                raise
            pid, uid = _protocol.peer_credentials(sock)
            if not _protocol.trusted(uid):
                sock.close()
                if address != path:
                    continue
                raise SupervisorError(
                    f"the process listening as the native supervisor of {self._run} (pid "
                    f"{pid}, uid {uid}) is not run by root or by you: refusing to talk to it; "
                    "stop that process"
                )
            return sock
        return None

    def _not_answering(self, pid: int | None, hello: float) -> NotAnswering:
        if pid is None:
            with contextlib.suppress(OSError, ValueError):
                pid = int(self.pid_path.read_text().split()[0])
        who = f"the native supervisor (pid {pid})" if pid else "the native supervisor"
        stopped = bool(pid) and _stopped(pid or 0)
        how = "stopped by a signal" if stopped else "stopped (SIGSTOP?) or hung"
        resume = f"`kill -CONT {pid}` resumes it; or " if stopped else ""
        end = f"`kill -9 {pid}`" if pid else "killing it"
        return NotAnswering(
            f"{who} of {self._run} is not answering (nothing within {hello:g}s; it is {how}): "
            "nothing is supervised meanwhile, and a service that exits is not respawned. "
            f"{resume}{end} ends it, its watchdog ends its services, and `noderole apply` "
            f"starts them again under a new supervisor; see {self._log}",
            pid=pid,
            short=f"{who} is not answering ({how})",
        )

    def _send(
        self, request: dict[str, Any], *, timeout: float, hello: float = _protocol.HELLO_TIMEOUT
    ) -> dict[str, Any] | None:
        """One request; None when no daemon answers (absent, dead, or exiting).

        Raises :class:`NotAnswering` when a daemon accepts the connection but says no hello
        within ``hello`` seconds and is stopped or made no progress meanwhile (a daemon that used
        the CPU is busy, and is waited for up to ``timeout``); ``timeout`` also bounds the rest
        of the request.
        """
        request = {"v": _protocol.PROTOCOL_VERSION, **request}
        sock = self._connect(hello)
        if sock is None:
            return None
        try:
            pid = _protocol.peer_credentials(sock)[0]
            sock.settimeout(hello)
            data = b""
            give_up = time.monotonic() + timeout
            ticks = _cpu_ticks(pid)
            try:
                sock.sendall(_protocol.encode(request))
                while b"\n" not in data:
                    try:
                        chunk = sock.recv(65536)
                    except TimeoutError:
                        # Busy (it used the CPU meanwhile: a burst of work on a loaded machine)
                        # is not hung: wait on, within the request's own timeout. Stopped by a
                        # signal, or idle without answering, is.
                        now_ticks = _cpu_ticks(pid)
                        busy = not _stopped(pid) and now_ticks - ticks >= _busy_ticks(hello)
                        if not busy or time.monotonic() >= give_up:
                            raise
                        ticks = now_ticks
                        continue
                    if not chunk:
                        break
                    data += chunk
            except (BrokenPipeError, ConnectionResetError):
                return None
            except TimeoutError:
                raise self._not_answering(pid, hello) from None
            first, _, rest = data.partition(b"\n")
            if first.strip() and _is_hello(first):
                data = rest
                sock.settimeout(timeout)
                try:
                    while chunk := sock.recv(65536):
                        data += chunk
                except (BrokenPipeError, ConnectionResetError):
                    return None
                except TimeoutError:
                    raise SupervisorError(
                        f"the native supervisor (pid {pid}) of {self._run} did not answer "
                        f"{request['op']!r} within {timeout:g}s; see {self._log}"
                    ) from None
        finally:
            sock.close()
        if not data.strip():
            return None  # it exited while we asked
        answer = _protocol.decode(data)
        if answer.get("retry"):
            return None
        if answer.get("v") != _protocol.PROTOCOL_VERSION and not answer.get("ok"):
            raise self._other_version(pid, answer.get("v"))
        return answer

    def _other_version(self, pid: int, version: object) -> OtherVersion:
        ours = _protocol.PROTOCOL_VERSION
        short = f"the native supervisor (pid {pid}) of {self._run} runs another version of noderole"
        if isinstance(version, int) and version < ours:
            when = "it was started before noderole was upgraded"
        elif isinstance(version, int):
            when = "it was started by a newer noderole, since replaced by this older one"
        else:
            when = "it was started by another noderole"
        return OtherVersion(
            f"{short} (protocol {version!r}; this noderole speaks {ours}): {when}, and goes on "
            "supervising its services but takes no orders from this version. `noderole stop` "
            "ends it, stopping every service it runs; `noderole apply ROLE` then starts them "
            "under this version",
            pid=pid,
            short=short,
        )

    def _request(self, request: dict[str, Any], *, start: bool) -> dict[str, Any] | None:
        """Send, starting the daemon first if ``start`` (and again if it was just exiting)."""
        for attempt in range(5):
            answer = self._send(request, timeout=self.timeout)
            if answer is None:
                if not start:
                    return None
                if attempt:
                    time.sleep(0.01)
                self.ensure_running()
                continue
            if not answer.get("ok"):
                raise SupervisorError(
                    f"the native supervisor refused {request['op']!r}: {answer.get('error')}"
                )
            return answer
        raise SupervisorError(
            f"the native supervisor in {self._run} keeps exiting before it answers; see {self._log}"
        )

    def _statuses(self, answer: dict[str, Any]) -> list[ServiceStatus]:
        try:
            return [ServiceStatus.from_wire(s) for s in answer.get("statuses", [])]
        except SchemaError as e:
            raise SupervisorError(
                f"the native supervisor in {self._run} answered a malformed status: {e}"
            ) from None

    def start(self, spec: ProcessSpec, *, wait_ready: bool = False) -> ServiceStatus:
        """Start the service's process (starting the daemon if needed).

        Idempotent: the same name and fingerprint already running answers ``already_running``
        and starts nothing; another fingerprint stops the old process and starts the new one.
        A process that cannot start at all comes back ``crashed`` with the reason.
        ``wait_ready``: with a readiness check, answer once it passed or timed out.
        """
        request = {"op": "start", "spec": spec.to_wire(), "wait_ready": wait_ready}
        answer = self._request(request, start=True)
        assert answer is not None
        return self._statuses(answer)[0]

    def restart(self, spec: ProcessSpec, *, wait_ready: bool = False) -> ServiceStatus:
        """Stop the service if it runs (whatever its fingerprint), then start it."""
        request = {"op": "restart", "spec": spec.to_wire(), "wait_ready": wait_ready}
        answer = self._request(request, start=True)
        assert answer is not None
        return self._statuses(answer)[0]

    def stop(
        self, names: Sequence[str], *, waves: Sequence[Sequence[str]] | None = None
    ) -> list[ServiceStatus]:
        """Stop services in the given order; return once every process of each group is gone.

        ``waves``: ``names`` in groups, in stop order, whose services depend on none of each
        other: each group is stopped together (one ``stop_timeout`` per group at most).
        With no daemon, but processes of a killed one's services left running (it was killed
        with its watchdog), a daemon is started to end them: what it ended is then in
        :attr:`killed_leftovers`, every service's, not only the ones named."""
        self.killed_leftovers = {}
        request: dict[str, Any] = {"op": "stop", "names": list(names)}
        if waves is not None:
            request["waves"] = [list(wave) for wave in waves]
        try:
            answer = self._request(request, start=False)
        except OtherVersion as e:
            return self._end_other_version(e, list(names))
        if answer is None and self._leftovers():
            answer = self._request(request, start=True)  # a new daemon kills the leftovers
            if answer is not None:
                self.killed_leftovers = _killed(answer.get("killed_leftovers"))
        if answer is None:
            return self._from_state(list(names))
        return self._statuses(answer)

    def status(
        self,
        names: Sequence[str] | None = None,
        *,
        hello: float = STATUS_HELLO_TIMEOUT,
        strict: bool = False,
    ) -> list[ServiceStatus]:
        """Statuses of the named services (all known ones if None), daemon running or not.

        A daemon that says no hello within ``hello`` seconds is not answering: the statuses are
        then the recorded ones, each process looked up in /proc (:meth:`_from_state`), and a
        warning says so; with ``strict``, :class:`NotAnswering` is raised instead (a caller
        about to act on the answer: ``apply``)."""
        request = {"op": "status", "names": list(names) if names is not None else None}
        try:
            answer = self._send(request, timeout=self.timeout, hello=hello)
        except (NotAnswering, OtherVersion) as e:
            # Its services run on as it last recorded them; this client starts nothing more.
            self.not_answering = str(e)
            self.hung = e.short if isinstance(e, NotAnswering) else None
            if strict and isinstance(e, NotAnswering):
                raise
            self.warn(str(e))
            listed = list(names) if names is not None else None
            if isinstance(e, NotAnswering):
                return self._from_state(listed, hung=e.short, look=True)
            return self._from_state(listed, hung=e.short)
        self.not_answering = self.hung = None
        if answer is not None and not answer.get("ok"):
            raise SupervisorError(f"the native supervisor refused 'status': {answer.get('error')}")
        if answer is None:
            return self._from_state(list(names) if names is not None else None)
        return self._statuses(answer)

    def publish_textfile(
        self, path: str, *, role: str, names: Sequence[str], head: str
    ) -> bool | None:
        """Make the running daemon the writer of the fleet metrics file ``path`` (local): it
        writes ``head`` and ``role``'s service families (``names``) now and after every later
        state change. True when written, False when the daemon could not (it logs why), None
        when no daemon runs (the caller writes the file itself). Never starts a daemon."""
        request = {"op": "textfile", "path": path, "role": role, "names": list(names), "head": head}
        answer = self._request(request, start=False)
        return None if answer is None else bool(answer.get("written"))

    def shutdown(self) -> None:
        """Stop every service and let the daemon exit; return once it has.

        Also waits for a daemon that was already exiting: the abstract name it holds to its
        last breath is free once it is gone.
        """
        try:
            pid = self.daemon_pid()
        except OtherVersion as e:
            self._terminate(e.pid)
            return
        if pid is None and self._leftovers():
            self.ensure_running(to_shut_down=True)  # a new daemon kills the leftovers
            pid = self.daemon_pid()
        if pid is not None:
            self._request({"op": "shutdown"}, start=False)
        self._wait_gone(30.0)

    def close(self) -> None:
        """:meth:`shutdown`, for good as far as this object goes: a daemon another thread is
        starting meanwhile is waited for and shut down too, and no later call starts one (a
        rehearsal's clean-up, while the threads of its interrupted apply run on)."""
        with self._starting:
            self._closed = True
            unheard, self._unheard = self._unheard, None
        if unheard is not None:
            unheard.ready()  # once it has answered (or failed), the shutdown finds it
        self.discard()
        self.shutdown()

    def _end_other_version(self, other: OtherVersion, names: list[str]) -> list[ServiceStatus]:
        """Stop ``names`` under a daemon of another version: end it, if that stops no service
        beyond them (it can only be ended as a whole); statuses as it recorded them at its end."""
        others = [n for n, s in self._load().services.items() if s.active and n not in names]
        if others:
            raise SupervisorError(
                f"cannot stop only {', '.join(names)}: {other.short}, which takes no orders from "
                f"this version and can only be ended as a whole, and it also runs "
                f"{', '.join(others)}. `noderole stop` stops the role and ends it (`kill "
                f"{other.pid}` ends it and every service it runs)"
            )
        self._terminate(other.pid)
        return self._from_state(names)

    def _terminate(self, pid: int) -> None:
        """SIGTERM the daemon ``pid`` (it stops every service, then exits, as every version of it
        does) and return once it has exited.

        The pid is taken again from a live connection to the daemon, and a pidfd opened while it
        is held: the signal goes to that process, never to a process that took over its pid.
        """
        import select
        import signal

        sock = self._connect(_protocol.HELLO_TIMEOUT)
        if sock is None:
            return  # gone meanwhile
        try:
            holder = _protocol.peer_credentials(sock)[0]
            if holder != pid:
                raise SupervisorError(
                    f"the native supervisor of {self._run} changed while noderole looked at it "
                    f"(pid {pid}, now {holder}): run the command again"
                )
            pidfd = os.pidfd_open(holder)
        except ProcessLookupError:
            return
        finally:
            sock.close()
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            if not poller.poll(self.timeout * 1000):
                raise SupervisorError(
                    f"the native supervisor (pid {holder}) of {self._run} did not exit within "
                    f"{self.timeout:g}s of SIGTERM (it stops its services first); see {self._log}"
                )
        except ProcessLookupError:
            pass  # it exited between the pidfd and the signal
        finally:
            os.close(pidfd)
        self._wait_gone(_START_TIMEOUT)

    def _wait_gone(self, timeout: float) -> None:
        """Return once no daemon holds this node's abstract name."""
        try:
            address = _protocol.abstract_address(self._run)
        except OSError:
            return
        deadline = time.monotonic() + timeout
        while True:
            holder = _protocol.listener(address)
            if holder is None:
                return
            if _foreign(holder) and self._lock_free():
                return  # another user's process holds the name: the daemon's lock tells
            if time.monotonic() >= deadline:
                raise SupervisorError(
                    f"the native supervisor of {self._run} did not exit after shutdown "
                    f"(waited {timeout:g}s); see {self._log}"
                )
            time.sleep(0.01)

    def _lock_free(self) -> bool:
        """No daemon holds the run directory's lock (each holds it for life): it is gone."""
        import fcntl

        try:
            fd = os.open(
                os.path.join(self._run, _protocol.LOCK_NAME),
                os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC,
            )
        except FileNotFoundError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)  # and with it the lock, if taken: a starting daemon waits for it
        return True

    # ---- without a daemon

    # The state file's module (and _proc with it) is imported here: a daemon that answers
    # (`status`) needs neither.

    def _load(self) -> _state.State:
        from noderole.supervisor import _state

        return _state.load_state(os.path.join(self._run, _protocol.STATE_NAME), self.warn)

    def _leftovers(self) -> bool:
        from noderole.supervisor import _state

        return bool(_state.leftover_groups(self._load()))

    def _from_state(
        self, names: list[str] | None, hung: str = "", *, look: bool = False
    ) -> list[ServiceStatus]:
        """Statuses as the state file last recorded them (``hung``: why the daemon is not asked).

        With ``look`` (the daemon holds the node but does not answer, so nothing respawns what
        exits), each recorded process is looked up in /proc: one that is gone (a zombie too),
        or whose pid another process has taken (another start time), is shown ``crashed``."""
        state = self._load()
        if hung:
            if names is None:
                names = list(state.services)
            recorded = [
                state.services.get(n) or ServiceStatus(name=n, reason="not supervised")
                for n in names
            ]
            if look:
                return [_as_it_is(status, hung) for status in recorded]
            return [status.but(reason=f"as last recorded: {hung}") for status in recorded]
        from noderole.supervisor import _state

        leftovers = _state.leftover_groups(state)
        if names is None:
            names = list(state.services)
        out = []
        for name in names:
            status = state.services.get(name) or ServiceStatus(name=name, reason="not supervised")
            if status.active:
                status = status.but(
                    state="stopped", reason="the supervisor is not running (it was killed)"
                )
            if name in leftovers:
                pids = " ".join(map(str, leftovers[name][1]))
                status = status.but(
                    reason=f"{status.reason}; its processes {pids} survived it and will be "
                    "killed at the next start"
                )
            else:
                status = status.but(pid=None)
            out.append(status)
        return out


def _as_it_is(status: ServiceStatus, hung: str) -> ServiceStatus:
    """``status`` as recorded by a daemon that does not answer (``hung`` says which), its
    process looked up in /proc: nothing respawns a process that is gone meanwhile."""
    if not status.active:
        kept = status.reason not in ("", "not supervised")
        return status.but(reason=f"{status.reason}; {hung}" if kept else hung)
    from noderole.supervisor import _proc  # only when the daemon does not answer

    pid, ticks = status.pid, status.start_ticks
    if status.state != "backoff" and pid is not None and _proc.is_alive(pid, ticks):
        return status.but(reason=f"its process runs, unsupervised: {hung}")
    gone = f"its process {pid} is gone" if status.state != "backoff" and pid else "no process"
    return status.but(
        state="crashed",
        pid=None,
        start_ticks=None,
        started_at=None,
        reason=f"{gone}, and nothing respawns it: {hung}",
    )


def _killed(reported: object) -> dict[str, list[int]]:
    """A stop answer's ``killed_leftovers`` (name -> pids), what is well formed of it."""
    if not isinstance(reported, dict):
        return {}
    return {
        str(name): [p for p in pids if type(p) is int]
        for name, pids in reported.items()
        if isinstance(pids, list)
    }


def _launch_argv(run_dir: str, fd: int, *extra: str) -> list[str]:
    return [
        # Not a made-up argv[0]: the interpreter finds its own standard library from it. The
        # daemon retitles itself once running (_title).
        sys.executable,
        "-I",
        "-S",
        "-c",
        _LAUNCH,
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))),
        run_dir,
        str(fd),
        *extra,
    ]


def _spawn(run_dir: str, log_fd: int, extra: tuple[str, ...] = ()) -> _Spawned:
    """Start a daemon for ``run_dir`` writing to ``log_fd`` (closed here)."""
    import subprocess

    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        with os.fdopen(log_fd, "ab") as log:
            first = subprocess.Popen(
                _launch_argv(run_dir, w, *extra),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(w,),
                start_new_session=True,
                cwd="/",
                env=_daemon_environment(),
            )
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return _Spawned(first, r)


class _Spawned:
    """A daemon started by :func:`_spawn`, until its first word is heard."""

    def __init__(self, first: subprocess.Popen[bytes], word: int) -> None:
        self.first = first
        self.word = word
        self.message: str | None = None

    def ready(self) -> str:
        """Its first word (``ok``, or why it could not start). Interrupted, the pipe stays open
        (the daemon's word still finds a listener) and a later call hears it."""
        # The word first, then the session leader (it exits right after the second fork, long
        # before the daemon answers): Popen.wait with a timeout polls at growing intervals.
        if self.message is None:
            self.message = _read_line(self.word, _START_TIMEOUT)
            os.close(self.word)
        self.first.wait(timeout=_START_TIMEOUT)
        return self.message


class _Standby:
    """A daemon's interpreter started ahead of need (:meth:`Supervisor.prepare`).

    It runs ``main(RUN_DIR FD standby)``: imports, then waits on a socket for the go, which
    carries the log file's descriptor and path; its ready word comes back on the same socket.

    Spawned with :func:`os.posix_spawn`, not :mod:`subprocess`: every boot's apply starts one,
    and importing subprocess (with signal, selectors and locale) cost it ~12M instructions on
    the main thread. What Popen did in the child is done here or by the standby itself: stdin,
    stdout and stderr from /dev/null and a new session (spawn actions), the socket on fd
    :data:`STANDBY_FD` (a dup2, which clears close-on-exec); the working directory ``/`` and
    the closing of any other inherited descriptor (the standby, first thing:
    :func:`~noderole.supervisor._daemon.main`).
    """

    def __init__(self, run_dir: str, extra: tuple[str, ...] = ()) -> None:
        # _socket, as for requests: the socket module's enums are not needed for one pair.
        self._status: int | None = None
        self._word: str | None = None
        ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
        # A dup2 onto itself would keep close-on-exec: the standby's end moves if it is on 3.
        target = STANDBY_FD if theirs.fileno() != STANDBY_FD else STANDBY_FD + 1
        try:
            self.channel = ours  # close-on-exec, as every socket Python makes
            self.pid = os.posix_spawn(
                sys.executable,
                _launch_argv(run_dir, target, "standby", *extra),
                _daemon_environment(),
                file_actions=[
                    # The socket first: a caller without stdin may have been given fd 0 for it.
                    (os.POSIX_SPAWN_DUP2, theirs.fileno(), target),
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDWR, 0),
                    (os.POSIX_SPAWN_DUP2, 0, 1),
                    (os.POSIX_SPAWN_DUP2, 0, 2),
                ],
                setsid=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()

    def go(self, log_fd: int, log_path: str) -> bool:
        """Hand it the log (its descriptor and path) and let it start; False if it is gone (then
        it is reaped here)."""
        rights = log_fd.to_bytes(4, sys.byteorder, signed=True)  # one C int, as SCM_RIGHTS wants
        message = b"go\n" + os.fsencode(log_path)
        try:
            self.channel.sendmsg([message], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
        except OSError:
            self.discard()
            return False
        return True

    def ready(self) -> str:
        """Its first word after the go (``ok``, or why it could not start). Interrupted, the
        socket stays open (the daemon's word still finds a listener) and a later call hears it.
        """
        if self._word is None:
            self._word = _read_line(self.channel.fileno(), _START_TIMEOUT)
            self.channel.close()
        message = self._word
        # The session leader exits right after its fork, before the daemon's word; one that has
        # not exited by now never got as far (no word within the timeout): it is killed.
        if self.poll(timeout=_START_TIMEOUT if message else 0.0) is None:
            self._kill()
        return message

    def poll(self, timeout: float = 0.0) -> int | None:
        """Its exit status once it has exited (reaped), waiting up to ``timeout``; else None."""
        from noderole.supervisor._proc import wait_exit  # only where a standby was started

        if self._status is None:
            self._status = wait_exit(self.pid, timeout)
        return self._status

    def discard(self) -> None:
        """End it: it has touched nothing yet, so a SIGKILL leaves nothing behind."""
        self.channel.close()
        if self.poll() is None:
            self._kill()

    def _kill(self) -> None:
        import signal  # only for a standby nothing needed: not on an apply's way

        # Not reaped yet, so the pid cannot have been reused.
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:  # SIGCHLD ignored: the kernel reaped it
            self._status = -signal.SIGKILL
        else:
            self._status = os.waitstatus_to_exitcode(status)


STANDBY_FD = 3
"""Where the standby finds its end of the socket (4 when the client's own end was on 3)."""


def default_log_path(run_dir: Path) -> Path:
    """The supervisor's log: ``ROOT/var/log/noderole/supervisor.log`` for ``ROOT/run/noderole``."""
    from pathlib import Path

    return Path(_default_log(_posix(run_dir)))


def _default_log(run_dir: str) -> str:
    """:func:`default_log_path` of a run directory spelled as :func:`_posix` spells it."""
    from noderole.supervisor import _title  # only where the log is named: not on every request

    root = _title.root_of(run_dir)
    if root == run_dir:
        return os.path.join(run_dir, "supervisor.log")
    return os.path.join(root, "var/log/noderole/supervisor.log")


def _posix(path: str | os.PathLike[str]) -> str:
    """``str(pathlib.Path(path))`` without pathlib: empty and ``.`` components dropped, ``..``
    kept, exactly two leading slashes kept (POSIX leaves their meaning to the system)."""
    text = os.fspath(path)
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if not text.startswith("/"):
        return "/".join(parts) or "."
    lead = "//" if text.startswith("//") and not text.startswith("///") else "/"
    return lead + "/".join(parts)


def _log_remedy(error: OSError) -> str:
    """The fix for a log that cannot be opened, as a sentence: a full file system's is not a
    read-only one's (which said "free space" before)."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free space or inodes on its file system (df -h, df -i)"
    else:
        fix = _safeopen.fix_for(error) or "remove what is in its way"
    return fix[0].upper() + fix[1:]


def _warn(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")


def _daemon_environment() -> dict[str, str]:
    """The daemon's own environment: only PATH (it passes each child its spec's environment)."""
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    for name in ("NODEROLE_SUPERVISOR_LOG_BYTES", "NODEROLE_SUPERVISOR_LOG_KEEP"):
        if name in os.environ:  # the daemon's own log history (_log)
            env[name] = os.environ[name]
    return env


def _flock(fd: int, timeout: float, what: str) -> None:
    import fcntl  # here, as select below: a request (`status`) takes no lock and reads no pipe

    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise SupervisorError(f"{what} (lock held for {timeout:g}s)") from None
            time.sleep(0.01)


def _read_line(fd: int, timeout: float) -> str:
    """Read up to the first newline or EOF, for at most ``timeout`` seconds."""
    import select

    data = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").split("\n")[0].strip()


def _tail(path: Path, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        text = path.read_text(errors="replace").strip().splitlines()[-lines:]
        if text:
            return "\n  " + "\n  ".join(text)
    return ""


def _stream() -> _socket.socket:
    """A close-on-exec unix stream socket (the request's, or a probe's)."""
    return _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)


def _connect_to(sock: _socket.socket, address: str) -> None:
    if address.startswith("\0"):
        sock.connect(address)
        return
    path, dirfd = _protocol.socket_address(address)
    try:
        sock.connect(path)
    finally:
        if dirfd is not None:
            os.close(dirfd)


def _is_hello(line: bytes) -> bool:
    try:
        return bool(_protocol.decode(line).get("accepted"))
    except ValueError:
        return False


def _cpu_ticks(pid: int) -> int:
    """CPU time ``pid`` has used so far (utime + stime, in clock ticks); -1 when unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return -1


def _busy_ticks(seconds: float) -> int:
    """CPU ticks that show a daemon working over ``seconds``: 5 % of one core, at least 2.

    Accounting is sampled per tick, so an idle process waking now and then may show one.
    """
    return max(2, int(seconds * os.sysconf("SC_CLK_TCK") * 0.05))


def _stopped(pid: int) -> bool:
    """``pid`` is stopped by a signal (state T in /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def _foreign(holder: tuple[int, int] | None) -> bool:
    """``holder`` (a listener's ``(pid, uid)``) is known, and no daemon of this node."""
    return holder is not None and not _protocol.trusted(holder[1])
