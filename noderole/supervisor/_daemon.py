"""The supervisor daemon: one process, one thread, one event loop for every service of the node.

The loop (``selectors``, i.e. epoll) waits on the control socket, one ``pidfd`` per child (a
child's exit wakes the loop at once: no SIGCHLD race, no polling), the pipes carrying children's
output, a self-pipe for signals (SIGHUP reopens logs; SIGTERM/SIGINT stop everything and exit),
and a heap of timers (respawn delays, stop timeouts, readiness ticks).

Single-threaded on purpose: a stop that arrives while a respawn is pending simply cancels the
timer; there is no second thread to race it (openrc#375, openrc#400). A watchdog process
(:mod:`._watchdog`) ends the services if this daemon is ever SIGKILLed.

Only the standard library and the sibling ``_`` modules are imported: the client starts this
module without importing the ``noderole`` package (which pulls in attrs and pluggy), which keeps
the daemon at ~12 MB RSS for 20 services.
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import itertools
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from noderole.supervisor import _child, _proc, _protocol, _readiness, _state
from noderole.supervisor._policy import RespawnPolicy

__all__ = ["main"]

ACTIVE = ("starting", "running", "ready", "backoff")
STARTUP_GRACE = 10.0
"""Seconds a daemon with nothing to supervise waits for its first request before exiting."""
KILL_GRACE = 5.0
"""Seconds to wait for a group to vanish after SIGKILL before reporting survivors."""
GROUP_POLL = 0.01
"""Seconds between two looks at a stopping process group."""
DAEMON_LOG_MAX = 1024 * 1024
"""The daemon's own log is rotated (one old copy) past this size."""


def _log(message: str) -> None:
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} noderole-supervisor[{os.getpid()}]: {message}\n"
    try:
        if os.fstat(2).st_size > DAEMON_LOG_MAX:
            path = os.readlink("/proc/self/fd/2")
            if path.startswith("/") and os.path.isfile(path):
                os.replace(path, path + ".1")
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
        os.write(2, line.encode(errors="replace"))
    except OSError:
        pass


# --------------------------------------------------------------------------- the loop


class Timer:
    """A callback due at a monotonic time; :meth:`cancel` makes it a no-op."""

    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    """selectors + a timer heap: the smallest event loop that does the job."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self.timers: list[tuple[float, int, Timer]] = []
        self.counter = itertools.count()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(time.monotonic() + max(0.0, delay), callback)
        heapq.heappush(self.timers, (timer.when, next(self.counter), timer))
        return timer

    def add_reader(self, fd: int, callback: Callable[[], None]) -> None:
        self.selector.register(fd, selectors.EVENT_READ, callback)

    def remove_reader(self, fd: int) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(fd)

    def run_once(self, max_wait: float) -> None:
        """Wait for one batch of events (or the next timer), then run their callbacks."""
        now = time.monotonic()
        while self.timers and self.timers[0][2].cancelled:
            heapq.heappop(self.timers)
        wait = max_wait
        if self.timers:
            wait = min(wait, max(0.0, self.timers[0][0] - now))
        for key, _ in self.selector.select(wait):
            _guarded(key.data)
        now = time.monotonic()
        while self.timers and self.timers[0][0] <= now:
            _, _, timer = heapq.heappop(self.timers)
            if not timer.cancelled:
                timer.cancelled = True
                _guarded(timer.callback)


def _guarded(callback: Callable[[], None]) -> None:
    """Run a callback; a bug in one must not kill the daemon (and, through the watchdog, all)."""
    try:
        callback()
    except Exception:
        import traceback

        _log("internal error, carrying on:\n" + traceback.format_exc())


# --------------------------------------------------------------------------- one service


class Unit:
    """One service: its spec, its current process, its counters and its state."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.fingerprint: str = spec.get("fingerprint", "")
        sup = spec.get("supervision") or {}
        self.stop_signal = _proc.signal_number(sup.get("stop_signal", "SIGTERM"))
        self.stop_timeout = float(sup.get("stop_timeout", 5))
        self.policy = RespawnPolicy(
            respawn_delay=float(sup.get("respawn_delay", 5)),
            respawn_max=int(sup.get("respawn_max", 0)),
            respawn_period=sup.get("respawn_period"),
            backoff_max=sup.get("backoff_max"),
        )
        self.state = "starting"
        self.reason = ""
        self.popen: subprocess.Popen[bytes] | None = None
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
        self.ready_waiters: list[Callable[[], None]] = []
        self.probe: _readiness.Probe | None = None
        self.probe_deadline = 0.0

    @property
    def log(self) -> str | None:
        return self.spec.get("stdout_log") or self.spec.get("stderr_log")

    def record(self) -> dict[str, Any]:
        """What the state file and a status response say about this service."""
        return {
            "name": self.name,
            "state": self.state,
            "pid": self.pid,
            "pgid": self.pid,
            "start_ticks": self.start_ticks,
            "started_at": self.started_at,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "log": self.log,
            "fingerprint": self.fingerprint,
            "reason": self.reason,
            "pidfile": self.spec.get("pidfile"),
        }


class Pipe:
    """The read end of a child's output pipe, copied into a log sink."""

    def __init__(self, daemon: Daemon, fd: int, sink: _child.LogSink) -> None:
        self.daemon = daemon
        self.fd = fd
        self.sink = sink
        self.closed = False
        os.set_blocking(fd, False)
        daemon.loop.add_reader(fd, self.on_readable)

    def on_readable(self) -> None:
        if self.closed:
            return  # the fd number may already belong to someone else
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.sink.write(data)
            return
        self.closed = True
        self.daemon.loop.remove_reader(self.fd)
        os.close(self.fd)
        self.daemon.release_sink(self.sink)


# --------------------------------------------------------------------------- the daemon


class Daemon:
    """Serves requests and keeps services alive until nothing is left to supervise."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.state_path = os.path.join(run_dir, _protocol.STATE_NAME)
        self.socket_path = os.path.join(run_dir, _protocol.SOCKET_NAME)
        self.pid_path = os.path.join(run_dir, _protocol.PID_NAME)
        self.loop = Loop()
        self.units: dict[str, Unit] = {}
        self.past: dict[str, dict[str, Any]] = {}
        """Final statuses from earlier daemons, reported until the service is started again."""
        self.sinks: dict[str, _child.LogSink] = {}
        self.connections = 0
        self.pending = 0
        """Requests waiting for something (a stop, a readiness) before they answer."""
        self.exiting = False
        self.dirty = False
        self.started = time.monotonic()
        self.ever_supervised = False
        self.listener: socket.socket | None = None
        self.self_ticks = (_proc.proc_stat(os.getpid()) or _proc.ProcStat(0, "R", 0, 0, 0, 0))[5]
        self.watchdog: subprocess.Popen[bytes] | None = None
        """The process that ends the services if this daemon is SIGKILLed."""
        self.watchdog_fd = -1

    # ---- start-up and shut-down

    def recover(self) -> None:
        """Kill what a SIGKILLed predecessor left running, and keep its final statuses."""
        data = _state.read_state(self.state_path)
        killed = _state.kill_leftovers(data)
        for name, record in data["services"].items():
            if not isinstance(record, dict):
                continue
            if record.get("state") in ACTIVE:
                record["state"] = "stopped"
                record["reason"] = "supervisor was killed"
                if name in killed:
                    pids = " ".join(map(str, killed[name]))
                    record["reason"] += f"; killed its leftover processes: {pids}"
                    _log(f"{name}: killed leftover processes of a killed supervisor: {pids}")
                self._remove_pidfile(record.get("pidfile"), record.get("pid"))
            record["pid"] = record["pgid"] = record["start_ticks"] = record["started_at"] = None
            self.past[name] = record

    def start_watchdog(self) -> None:
        """Start the process that ends the services if this daemon is SIGKILLed (_watchdog)."""
        package_parent = os.path.dirname(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        )
        self.watchdog = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                "-c",
                _protocol.bootstrap("_watchdog"),
                package_parent,
                self.run_dir,
                str(os.getpid()),
                str(self.self_ticks),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=2,  # the daemon's own log
            start_new_session=True,
            close_fds=True,
            cwd="/",
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        self.watchdog_fd = os.pidfd_open(self.watchdog.pid)
        self.loop.add_reader(self.watchdog_fd, self.on_watchdog_exit)

    def on_watchdog_exit(self) -> None:
        """The watchdog died (someone killed it): reap it and start another."""
        if self.watchdog is None or self.watchdog.poll() is None:
            return
        self.loop.remove_reader(self.watchdog_fd)
        os.close(self.watchdog_fd)
        _log(f"watchdog {self.watchdog.pid} exited ({self.watchdog.returncode}); starting another")
        self.watchdog = None
        if not self.exiting:
            self.start_watchdog()

    def listen(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        address, dirfd = _protocol.socket_address(self.socket_path)
        old = os.umask(0o177)  # the socket is born 0600: no window where others may connect
        try:
            sock.bind(address)
        finally:
            os.umask(old)
            if dirfd is not None:
                os.close(dirfd)
        sock.listen(64)
        sock.setblocking(False)
        self.listener = sock
        self.loop.add_reader(sock.fileno(), self.on_accept)

    def persist(self) -> None:
        """Note that the state changed; :meth:`flush` writes it once per loop iteration.

        Writing after the event batch, not in the middle of a respawn, keeps the file write out
        of the respawn latency (the new child is already running while it happens).
        """
        self.dirty = True

    def flush(self) -> None:
        """Write the state file if something changed."""
        if not self.dirty:
            return
        self.dirty = False
        services = dict(self.past)
        for name, unit in self.units.items():
            services[name] = unit.record()
        data = {
            "supervisor": {"pid": os.getpid(), "start_ticks": self.self_ticks},
            "services": services,
        }
        try:
            _state.write_state(self.state_path, data)
        except OSError as e:
            _log(f"cannot write {self.state_path}: {e}")

    def idle(self) -> bool:
        """Nothing to supervise and nobody waiting for an answer."""
        if (
            self.pending
            or self.connections
            or any(u.state in ACTIVE or u.stopping for u in self.units.values())
        ):
            return False
        if self.ever_supervised:
            return True
        return time.monotonic() - self.started > STARTUP_GRACE

    def run(self) -> None:
        while not (self.exiting or self.idle()):
            self.loop.run_once(1.0)
            self.flush()
        self.close()

    def close(self) -> None:
        """Stop listening, answer queued clients "retry", drop the pid file, persist, and go."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        if self.listener is not None:
            self.listener.setblocking(False)
            while True:
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    break
                with contextlib.suppress(OSError), conn:
                    conn.sendall(_protocol.encode(self._retry()))
            self.listener.close()
        self.persist()
        self.flush()
        self.stop_watchdog()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.pid_path)
        _log("nothing left to supervise: exiting")

    def stop_watchdog(self) -> None:
        """A clean exit has stopped every service itself: end the watchdog before going, so no
        noderole process stays behind."""
        watchdog, self.watchdog = self.watchdog, None
        if watchdog is None:
            return
        self.loop.remove_reader(self.watchdog_fd)
        os.close(self.watchdog_fd)
        with contextlib.suppress(ProcessLookupError):
            watchdog.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            watchdog.wait(timeout=KILL_GRACE)

    @staticmethod
    def _retry() -> dict[str, Any]:
        v = _protocol.PROTOCOL_VERSION
        return {"v": v, "ok": False, "retry": True, "error": "supervisor exiting"}

    # ---- signals

    def on_signal_bytes(self, fd: int) -> None:
        try:
            data = os.read(fd, 512)
        except BlockingIOError:
            return
        for signum in data:
            if signum == signal.SIGHUP:
                for sink in self.sinks.values():
                    sink.reopen()
                _log("SIGHUP: log files reopened")
            elif signum in (signal.SIGTERM, signal.SIGINT):
                _log(f"{signal.Signals(signum).name}: stopping every service")
                self.stop_all(lambda: setattr(self, "exiting", True))

    # ---- the control socket

    def on_accept(self) -> None:
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        conn.setblocking(False)
        buffer = bytearray()
        self.connections += 1
        finished = [False]

        def on_readable() -> None:
            if finished[0]:
                return
            try:
                chunk = conn.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            buffer.extend(chunk)
            if chunk and b"\n" not in chunk and len(buffer) < _protocol.MAX_MESSAGE:
                return
            finished[0] = True
            self.loop.remove_reader(conn.fileno())
            if not buffer.strip():
                self._close_conn(conn)
                return
            self.handle(bytes(buffer), lambda response: self._answer(conn, response))

        self.loop.add_reader(conn.fileno(), on_readable)

    def _answer(self, conn: socket.socket, response: dict[str, Any]) -> None:
        response = {"v": _protocol.PROTOCOL_VERSION, **response}
        try:
            conn.setblocking(True)
            conn.settimeout(2.0)
            conn.sendall(_protocol.encode(response))
        except OSError:
            pass
        self._close_conn(conn)

    def _close_conn(self, conn: socket.socket) -> None:
        conn.close()
        self.connections -= 1

    def handle(self, data: bytes, reply: Callable[[dict[str, Any]], None]) -> None:
        """Decode one request and run it; ``reply`` is called once, now or later."""
        try:
            request = _protocol.decode(data)
        except ValueError as e:
            reply({"ok": False, "error": f"malformed request: {e}"})
            return
        version = request.get("v")
        if version != _protocol.PROTOCOL_VERSION:
            reply(
                {
                    "ok": False,
                    "error": f"protocol version {version!r} is not supported; this supervisor "
                    f"speaks {_protocol.PROTOCOL_VERSION}: shut it down and start it again",
                }
            )
            return
        op = request.get("op")
        self.pending += 1

        answered = [False]

        def done(response: dict[str, Any]) -> None:
            if answered[0]:
                return  # one answer per request, even if a bug below raises after it
            answered[0] = True
            self.pending -= 1
            reply(response)

        try:
            if op == "ping":
                done({"ok": True, "pid": os.getpid()})
            elif op == "status":
                done({"ok": True, "statuses": self.statuses(request.get("names"))})
            elif op == "start":
                self.op_start(request["spec"], bool(request.get("wait_ready")), False, done)
            elif op == "restart":
                self.op_start(request["spec"], bool(request.get("wait_ready")), True, done)
            elif op == "stop":
                self.op_stop([str(n) for n in request["names"]], done)
            elif op == "shutdown":

                def all_stopped() -> None:
                    self.exiting = True
                    done({"ok": True, "statuses": []})

                self.stop_all(all_stopped)
            else:
                done({"ok": False, "error": f"unknown operation {op!r}"})
        except (KeyError, TypeError, ValueError) as e:
            done({"ok": False, "error": f"bad {op} request: {type(e).__name__}: {e}"})
        except Exception as e:
            import traceback

            _log(f"internal error in {op!r}:\n{traceback.format_exc()}")
            done({"ok": False, "error": f"internal error in {op!r}: {type(e).__name__}: {e}"})

    # ---- operations

    def statuses(self, names: list[str] | None) -> list[dict[str, Any]]:
        if names is None:
            names = list(dict.fromkeys([*self.past, *self.units]))
        out = []
        for name in names:
            if name in self.units:
                out.append(self.units[name].record())
            elif name in self.past:
                out.append(self.past[name])
            else:
                out.append(_unknown(name))
        return out

    def op_start(
        self,
        spec: dict[str, Any],
        wait_ready: bool,
        force: bool,
        done: Callable[[dict[str, Any]], None],
    ) -> None:
        name = spec["name"]
        old = self.units.get(name)
        if old is not None and old.stopping:
            old.stop_waiters.append(lambda: self.op_start(spec, wait_ready, force, done))
            return
        if old is not None and old.state in ACTIVE:
            if old.fingerprint == spec.get("fingerprint") and not force:
                done({"ok": True, "statuses": [{**old.record(), "already_running": True}]})
                return
            why = "restarted" if force else "replaced: its definition changed"

            def then_start() -> None:
                self.op_start_new(spec, wait_ready, why, done)

            self.stop_unit(old, then_start)
            return
        self.op_start_new(spec, wait_ready, "", done)

    def op_start_new(
        self,
        spec: dict[str, Any],
        wait_ready: bool,
        why: str,
        done: Callable[[dict[str, Any]], None],
    ) -> None:
        unit = Unit(spec)
        if spec.get("readiness"):
            # Fail on a bad check now, in the answer to start, not silently later.
            _readiness.make_probe(spec["readiness"], {}).close()
        self.units[unit.name] = unit
        self.past.pop(unit.name, None)
        self.ever_supervised = True
        self._check_pidfile(unit)
        self.spawn(unit, first=True)
        if why and unit.state in ACTIVE:
            unit.reason = why

        def answer() -> None:
            done({"ok": True, "statuses": [unit.record()]})

        if wait_ready and unit.state == "running" and unit.probe is not None:
            unit.ready_waiters.append(answer)
        else:
            answer()

    def op_stop(self, names: list[str], done: Callable[[dict[str, Any]], None]) -> None:
        results: list[dict[str, Any]] = []
        queue = list(names)

        def next_one() -> None:
            if not queue:
                done({"ok": True, "statuses": results})
                return
            name = queue.pop(0)
            unit = self.units.get(name)
            if unit is None:
                results.append(self.past.get(name) or _unknown(name))
                next_one()
                return

            def stopped() -> None:
                results.append(unit.record())
                next_one()

            self.stop_unit(unit, stopped)

        next_one()

    def stop_all(self, then: Callable[[], None]) -> None:
        units = [u for u in self.units.values() if u.state in ACTIVE or u.stopping]
        left = [len(units)]
        if not units:
            then()
            return

        def one_done() -> None:
            left[0] -= 1
            if left[0] == 0:
                then()

        for unit in units:
            self.stop_unit(unit, one_done)

    # ---- processes

    def _check_pidfile(self, unit: Unit) -> None:
        """A pidfile left by someone else is stale: note it, never kill what it names."""
        path = unit.spec.get("pidfile")
        if not path:
            return
        try:
            with open(path) as f:
                pid = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return
        what = "a running process that is not ours" if _proc.is_alive(pid) else "no process"
        _log(f"{unit.name}: stale pidfile {path} names {pid}, {what}: replacing it")

    def _write_pidfile(self, unit: Unit) -> None:
        path = unit.spec.get("pidfile")
        if not path or unit.pid is None:
            return
        try:
            os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
            tmp = f"{path}.tmp"
            with open(tmp, "w") as f:
                f.write(f"{unit.pid}\n")
            os.replace(tmp, path)
        except OSError as e:
            _log(f"{unit.name}: cannot write pidfile {path}: {e}")

    @staticmethod
    def _remove_pidfile(path: str | None, pid: int | None) -> None:
        """Remove the pidfile if it still names ``pid`` (someone else may have rewritten it)."""
        if not path:
            return
        try:
            with open(path) as f:
                content = f.read().strip()
            if pid is None or content == str(pid):
                os.unlink(path)
        except OSError:
            pass

    def _sink(self, path: str) -> _child.LogSink:
        sink = self.sinks.get(path)
        if sink is None:
            sink = _child.LogSink(path)
            self.sinks[path] = sink
        sink.users += 1
        return sink

    def release_sink(self, sink: _child.LogSink) -> None:
        sink.users -= 1
        if sink.users <= 0:
            sink.close()
            self.sinks.pop(sink.path, None)

    def _output(self, path: str | None, max_bytes: int | None) -> tuple[int, Pipe | None]:
        """A write fd for the child, and the pipe that copies it into the log (None: /dev/null)."""
        if not path:
            return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC), None
        sink = self._sink(path)
        if max_bytes is not None:
            sink.max_bytes = max_bytes
        r, w = os.pipe2(os.O_CLOEXEC)
        return w, Pipe(self, r, sink)

    def spawn(self, unit: Unit, *, first: bool = False) -> None:
        """Start the unit's process; on failure, count it as an exit (or fail the first start)."""
        spec = unit.spec
        out_path, err_path = spec.get("stdout_log"), spec.get("stderr_log")
        max_bytes = spec.get("log_max_bytes")
        write_fds: list[int] = []
        pipes: list[Pipe] = []
        try:
            out_fd, out_pipe = self._output(out_path, max_bytes)
            write_fds.append(out_fd)
            pipes += [out_pipe] if out_pipe else []
            if err_path and err_path == out_path:
                err_fd = out_fd
            else:
                err_fd, err_pipe = self._output(err_path, max_bytes)
                write_fds.append(err_fd)
                pipes += [err_pipe] if err_pipe else []
            popen = _child.spawn(
                argv=spec["argv"],
                environment=spec.get("environment") or {},
                cwd=spec.get("cwd") or "/",
                user=spec.get("user"),
                group=spec.get("group"),
                stdout=out_fd,
                stderr=err_fd,
            )
        except (_child.SpawnError, OSError) as e:
            for fd in write_fds:
                os.close(fd)
            reason = str(e) if isinstance(e, _child.SpawnError) else f"cannot open a log: {e}"
            _log(f"{unit.name}: {reason}")
            if first:
                unit.state = "crashed"
                unit.reason = reason
                self.persist()
                self._finish_waiters(unit)
            else:
                unit.last_exit = reason
                self._after_exit(unit, ran_for=0.0)
            return
        for fd in write_fds:
            os.close(fd)
        del pipes  # they live on in the loop until their writers are gone
        unit.popen = popen
        unit.pid = popen.pid
        st = _proc.proc_stat(popen.pid)
        unit.start_ticks = st.start_ticks if st else None
        unit.started_at = time.time()
        unit.started_mono = time.monotonic()
        unit.state = "running"
        unit.reason = ""
        unit.pidfd = os.pidfd_open(popen.pid)
        self.loop.add_reader(unit.pidfd, lambda: self.on_child_exit(unit))
        self._write_pidfile(unit)
        if spec.get("readiness"):
            check = spec["readiness"]
            unit.probe = _readiness.make_probe(check, dict(spec.get("environment") or {}))
            unit.probe_deadline = time.monotonic() + float(
                check.get("timeout", _readiness.DEFAULT_TIMEOUT)
            )
            self._probe_tick(unit)
        self.persist()

    def _probe_tick(self, unit: Unit) -> None:
        probe = unit.probe
        if probe is None or unit.state != "running" or unit.stopping:
            return
        if probe.check():
            probe.close()
            unit.probe = None
            unit.state = "ready"
            unit.reason = ""
            self.persist()
            self._finish_ready_waiters(unit)
            return
        if time.monotonic() >= unit.probe_deadline:
            probe.close()
            unit.probe = None
            timeout = float(unit.spec["readiness"].get("timeout", _readiness.DEFAULT_TIMEOUT))
            unit.reason = f"not ready after {timeout:g}s"
            self.persist()
            self._finish_ready_waiters(unit)
            return
        unit.timer = self.loop.call_later(_readiness.INTERVAL, lambda: self._probe_tick(unit))

    def _finish_ready_waiters(self, unit: Unit) -> None:
        waiters, unit.ready_waiters = unit.ready_waiters, []
        for waiter in waiters:
            waiter()

    def _finish_waiters(self, unit: Unit) -> None:
        self._finish_ready_waiters(unit)
        waiters, unit.stop_waiters = unit.stop_waiters, []
        for waiter in waiters:
            waiter()

    def _reap(self, unit: Unit) -> int | None:
        """Collect the child's exit status if it has exited (never blocks)."""
        if unit.popen is None:
            return None
        code = unit.popen.poll()
        if code is None:
            return None
        if unit.pidfd is not None:
            self.loop.remove_reader(unit.pidfd)
            os.close(unit.pidfd)
            unit.pidfd = None
        unit.last_exit = _proc.describe_status(code)
        unit.popen = None
        return code

    def on_child_exit(self, unit: Unit) -> None:
        if self._reap(unit) is None:
            return
        if unit.probe is not None:
            unit.probe.close()
            unit.probe = None
        if unit.stopping:
            return  # the stop's own poll sees the group empty and finishes
        if unit.timer is not None:
            unit.timer.cancel()
        pgid = unit.pid
        ran_for = time.monotonic() - unit.started_mono
        if pgid is not None:
            # The group dies with its leader: a leftover grandchild would hold the port the
            # respawned process needs. (Processes meant to outlive it, like containerd shims,
            # leave the group with setsid/setpgid.)
            _proc.kill_group(pgid, signal.SIGKILL)
        self._after_exit(unit, ran_for)
        # Logged after the respawn so that the write is not part of the respawn latency.
        _log(f"{unit.name}: pid {pgid} exited ({unit.last_exit}) after {ran_for:.3f}s")

    def _after_exit(self, unit: Unit, ran_for: float) -> None:
        delay = unit.policy.on_exit(time.monotonic(), ran_for)
        if delay is None:
            self._remove_pidfile(unit.spec.get("pidfile"), unit.pid)
            unit.state = "crashed"
            n = unit.policy.respawn_max
            period = unit.policy.respawn_period
            within = f" within {period:g}s" if period is not None else ""
            unit.reason = f"gave up after {n} respawn{'s' if n != 1 else ''}{within}"
            unit.pid = unit.start_ticks = unit.started_at = None
            _log(f"{unit.name}: {unit.reason} (last: {unit.last_exit})")
            self.persist()
            self._finish_waiters(unit)
            return
        unit.state = "backoff"
        unit.reason = f"respawn in {delay:g}s"
        self._finish_ready_waiters(unit)
        if delay <= 0:
            self._respawn(unit)  # persists once the new child runs: one write, not two
        else:
            self.persist()
            unit.timer = self.loop.call_later(delay, lambda: self._respawn(unit))

    def _respawn(self, unit: Unit) -> None:
        if unit.stopping or unit.state != "backoff":
            return  # a stop came first: never start a new child (openrc#375)
        unit.restarts += 1
        self.spawn(unit)

    def stop_unit(self, unit: Unit, then: Callable[[], None]) -> None:
        """Stop: stop_signal to the group, SIGKILL after stop_timeout, until no member is left."""
        unit.stop_waiters.append(then)
        if unit.stopping:
            return
        if unit.timer is not None:
            unit.timer.cancel()
            unit.timer = None
        if unit.probe is not None:
            unit.probe.close()
            unit.probe = None
        pgid = unit.pid if unit.popen is not None or unit.state in ACTIVE else None
        if pgid is None:
            self._stopped(unit, [])
            return
        unit.stopping = True
        unit.reason = "stopping"
        ticks = unit.start_ticks
        _proc.kill_group(pgid, unit.stop_signal)
        _proc.kill_group(pgid, signal.SIGCONT)  # a stopped (T) process cannot act on SIGTERM
        kill_at = time.monotonic() + unit.stop_timeout
        give_up_at = kill_at + KILL_GRACE
        killed = [False]

        def poll() -> None:
            self._reap(unit)
            left = _proc.group_members(pgid, started_since=ticks)
            leader_alive = unit.popen is not None and _proc.is_alive(pgid)
            if not left and not leader_alive:
                self._reap_blocking(unit)
                self._stopped(unit, [])
                return
            now = time.monotonic()
            if now >= kill_at and not killed[0]:
                killed[0] = True
                _log(f"{unit.name}: still running {unit.stop_timeout:g}s after stop: SIGKILL")
                _proc.kill_group(pgid, signal.SIGKILL)
            elif now >= give_up_at:
                self._reap_blocking(unit)
                self._stopped(unit, left)
                return
            unit.timer = self.loop.call_later(GROUP_POLL, poll)

        poll()

    def _reap_blocking(self, unit: Unit) -> None:
        if unit.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                unit.popen.wait(timeout=1.0)
            self._reap(unit)

    def _stopped(self, unit: Unit, survivors: list[int]) -> None:
        self._remove_pidfile(unit.spec.get("pidfile"), unit.pid)
        unit.stopping = False
        unit.state = "stopped"
        unit.reason = "stopped"
        if survivors:
            unit.reason = f"processes survived SIGKILL: {' '.join(map(str, survivors))}"
        unit.pid = unit.start_ticks = unit.started_at = None
        self.persist()
        self._finish_waiters(unit)


def _unknown(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "state": "stopped",
        "pid": None,
        "started_at": None,
        "restarts": 0,
        "last_exit": None,
        "log": None,
        "fingerprint": "",
        "reason": "not supervised",
    }


# --------------------------------------------------------------------------- entry point


def _lock(run_dir: str, timeout: float) -> int | None:
    """Take the daemon lock (held for life); None if another daemon holds it past ``timeout``."""
    fd = os.open(
        os.path.join(run_dir, _protocol.LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
    )
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


def main(argv: list[str]) -> int:
    """``_daemon RUN_DIR READY_FD``: detach, lock, recover, listen, report ready, serve."""
    run_dir, ready_fd = argv[0], int(argv[1])
    # Second fork: the session leader (the client's child) exits at once; the daemon, not a
    # session leader, can never acquire a controlling terminal.
    if os.fork() > 0:
        os._exit(0)
    os.chdir("/")
    os.umask(0o022)

    def ready(message: str) -> None:
        with contextlib.suppress(OSError):
            os.write(ready_fd, message.encode() + b"\n")
            os.close(ready_fd)

    lock = _lock(run_dir, 5.0)
    if lock is None:
        ready(f"another supervisor holds {os.path.join(run_dir, _protocol.LOCK_NAME)}")
        return 1
    daemon = Daemon(run_dir)
    try:
        daemon.recover()
        with open(daemon.pid_path + ".tmp", "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(daemon.pid_path + ".tmp", daemon.pid_path)
        daemon.listen()
        daemon.persist()
        daemon.flush()
        daemon.start_watchdog()
    except Exception as e:
        ready(f"start-up failed: {type(e).__name__}: {e}")
        raise
    r, w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    for signum in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    daemon.loop.add_reader(r, lambda: daemon.on_signal_bytes(r))
    _log(f"supervising from {run_dir}")
    ready("ok")
    daemon.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
