"""One look at a condition: a path, a unix socket, a TCP port, an HTTP URL or a command.

Both users of a probe share this module, so a condition means the same thing to both:

- pre-start waits (``noderole/waits.py``) look again and again, woken by inotify or a short
  poll, until the wait's timeout;
- the supervisor's readiness checks (``noderole/supervisor/_readiness.py``) look on a timer from
  the daemon's event loop until the service's readiness timeout.

It lives in the supervisor package because the daemon imports it and must not leave the standard
library (no attrs, no ``noderole`` records); waits convert their records to these probes.

One meaning, whoever asks:

- ``readable``: a path counts only if this process may read it (``os.access(R_OK)``, as
  ``[ -r ]``); on by default, as in :class:`~noderole.records.WaitForPaths`.
- HTTP: one ``GET``; a 2xx status is ready; redirects are **not** followed (a 3xx is "not
  ready: HTTP 302"), as a kubelet probe would not follow one to another host; https does not
  verify the certificate (the question is "does it answer", and nothing secret is sent).
- timeouts: a single attempt (a connect, a request, a command run) lasts at most
  :data:`ATTEMPT_TIMEOUT` seconds and never longer than the time the caller has left, so a
  server that hangs cannot eat a whole wait; an HTTP attempt is bounded as a whole, not per
  read, so neither can one that sends a byte now and then. A host name's resolution is
  bounded too (:func:`_addresses`): the C library's resolver waits up to its own timeouts
  (``resolv.conf``: 5 s a query, twice, for each nameserver) when DNS is down at boot, so it
  runs in a thread of its own, one per host and port at a time, and a try that runs out of
  time says ``(name resolution timed out)``; the next try takes that thread's answer.

Standard library only.
"""

from __future__ import annotations

import _thread
import contextlib
import errno
import os
from collections.abc import Callable, Mapping

from noderole.supervisor._pathcheck import lacking
from noderole.supervisor._record import fields, record

TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
if TYPE_CHECKING:
    import socket
    import subprocess
    import threading
    import urllib.parse
    from typing import Any, Literal, TypeAlias

__all__ = [
    "ATTEMPT_TIMEOUT",
    "MIN_ATTEMPT",
    "CommandProbe",
    "HttpProbe",
    "Outcome",
    "PathProbe",
    "Probe",
    "SocketProbe",
    "TcpProbe",
    "attempt",
    "http_address",
    "probe_from_wire",
    "probe_to_wire",
]

ATTEMPT_TIMEOUT = 2.0
"""Longest single connect, request or command run."""
MIN_ATTEMPT = 0.05
"""Shortest attempt: at a deadline one last quick look is still worth it."""


@record()
class PathProbe:
    """Every path (``require="all"``) or one (``"any"``) exists, and is readable if asked."""

    paths: tuple[str, ...]
    """Local paths (already under the root)."""
    require: Literal["all", "any"] = "all"
    readable: bool = True
    labels: tuple[str, ...] = ()
    """How each path is named in messages (node paths); defaults to ``paths``."""


@record()
class SocketProbe:
    """A unix stream socket accepts a connection."""

    path: str
    label: str = ""


@record()
class TcpProbe:
    """A TCP port accepts a connection (the host is resolved on every attempt)."""

    host: str
    port: int


@record()
class HttpProbe:
    """``GET url`` answers 2xx (redirects not followed)."""

    url: str


@record()
class CommandProbe:
    """The command exits 0."""

    argv: tuple[str, ...]
    """What is run (argv[0] a local path)."""
    shown: tuple[str, ...] = ()
    """How it is named in messages; defaults to ``argv``."""


Probe: TypeAlias = PathProbe | SocketProbe | TcpProbe | HttpProbe | CommandProbe


@record(kw_only=False)
class Outcome:
    """The result of one look."""

    done: bool
    """The condition holds."""
    missing: tuple[str, ...] = ()
    """What is lacking, for messages (``tcp 127.0.0.1:80 (connection refused)``)."""
    watch: tuple[str, ...] = ()
    """Local paths whose appearance inotify can report; empty: poll instead."""


_DONE = Outcome(done=True)

_RUNNING: set[subprocess.Popen[bytes]] = set()
"""Command attempts under way in this process (any thread), for :func:`end_attempts`."""

_STARTING: set[int] = set()
"""Threads starting a command attempt: forked, perhaps, but not yet in :data:`_RUNNING`."""

_leaving = False
"""Set by :func:`end_attempts`: the process is leaving, and starts no attempt any more."""

_dying_of: int | None = None
"""The signal the process dies of once the attempt its main thread was starting is ended."""

START_BOUND = 5.0
"""Seconds :func:`end_attempts` waits for other threads to finish starting their attempts: a
fork and an ``exec`` take milliseconds, yet a thread stuck past this must not keep the process
from leaving."""


def attempt(
    probe: Probe,
    *,
    left: float,
    environment: Mapping[str, str] | None = None,
    started: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> Outcome:
    """Look once; a network try or command run lasts at most ``min(left, ATTEMPT_TIMEOUT)``.

    ``environment`` is a command's whole environment (default: this process's). ``started``
    is handed a command's process as soon as it runs, so a caller that gives up can kill it.
    """
    timeout = max(MIN_ATTEMPT, min(left, ATTEMPT_TIMEOUT))
    if isinstance(probe, PathProbe):
        return _paths(probe)
    if isinstance(probe, SocketProbe):
        return _socket(probe, timeout)
    if isinstance(probe, TcpProbe):
        return _tcp(probe, timeout)
    if isinstance(probe, HttpProbe):
        return _http(probe.url, timeout)
    # A command may legitimately take longer than a connect: it gets all the time left.
    return _command(probe, max(MIN_ATTEMPT, left), environment, started)


def _paths(probe: PathProbe) -> Outcome:
    missing, watch = lacking(
        probe.paths,
        probe.labels or probe.paths,
        require=probe.require,
        readable=probe.readable,
    )
    if not missing:
        return _DONE
    return Outcome(done=False, missing=tuple(missing), watch=tuple(watch))


def _socket(probe: SocketProbe, timeout: float) -> Outcome:
    # socket, subprocess and signal are imported by the probes that use them: an apply turns
    # every readiness check into a probe for the supervisor's spec and runs none of them.
    import socket

    label = f"unix socket {probe.label or probe.path}"
    if not os.path.lexists(probe.path):
        # Nothing can accept before the socket file exists: wait for it by inotify, not polling.
        return Outcome(done=False, missing=(f"{label} (absent)",), watch=(probe.path,))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(probe.path)
        except OSError as error:
            return Outcome(done=False, missing=(f"{label} ({_reason(error)})",))
    return _DONE


def _tcp(probe: TcpProbe, timeout: float) -> Outcome:
    import socket

    host, port = probe.host, probe.port
    label = f"tcp {f'[{host}]' if ':' in host else host}:{port}"
    deadline = _monotonic() + timeout
    try:
        # Resolved on every try: at boot the name may start resolving, or change, mid-wait.
        addresses = _addresses(host, port, deadline)
    except OSError as error:
        return Outcome(done=False, missing=(f"{label} ({_reason(error)})",))
    reason = "no address"
    for family, kind, proto, _, address in addresses:
        # connect_ex, not create_connection: no exception per refusal, a third less CPU a try.
        with socket.socket(family, kind, proto) as sock:
            try:
                sock.settimeout(_left(deadline))  # the whole try, as an HTTP one
            except TimeoutError:
                reason = "timed out"
                break
            code = sock.connect_ex(address)
        if code == 0:
            return _DONE
        reason = "timed out" if code in (errno.EAGAIN, errno.EINPROGRESS) else os.strerror(code)
    return Outcome(done=False, missing=(f"{label} ({reason.lower()})",))


class _ResolveTimeout(TimeoutError):
    """The resolver had not answered when the try's time ran out."""


class _Lookup:
    """One ``getaddrinfo`` under way in a thread of its own, and its answer once it is done."""

    __slots__ = ("answer", "done", "error")

    def __init__(self, done: threading.Event) -> None:
        self.done = done
        self.answer: list[tuple[Any, ...]] = []
        self.error: OSError | None = None

    def run(self, host: str, port: int) -> None:
        import socket

        try:
            self.answer = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as error:
            self.error = error
        except BaseException as error:  # a bug, or an interpreter going down: not ready
            self.error = OSError(str(error) or type(error).__name__)
        finally:
            self.done.set()


_LOOKUPS: dict[tuple[str, int], _Lookup] = {}
"""The resolution under way for each host and port (at most one; kept until a try takes it)."""
_LOOKUPS_LOCK = _thread.allocate_lock()


def _addresses(host: str, port: int, deadline: float) -> list[tuple[Any, ...]]:
    """``getaddrinfo(host, port)`` for a stream socket, given up at ``deadline``.

    An address is converted at once. A name is resolved in a daemon thread: with DNS down,
    glibc's resolver waits its own timeouts (``resolv.conf``: 5 s a query, twice, for each
    nameserver), which would hold a wait far past its deadline and a Ctrl-C until it answers.
    A try whose time runs out raises :class:`_ResolveTimeout` and leaves the thread to finish;
    a later try for the same host and port waits on that thread rather than starting another,
    and takes its answer. Where no thread can be started, the name is resolved here.
    """
    import socket

    try:  # an address: no resolver, no thread
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass
    import threading

    key = (host, port)
    with _LOOKUPS_LOCK:
        lookup = _LOOKUPS.get(key)
        if lookup is None:
            lookup = _LOOKUPS[key] = _Lookup(threading.Event())
            try:
                threading.Thread(
                    target=lookup.run, args=key, name=f"resolve {host}", daemon=True
                ).start()
            except RuntimeError:  # can't start new thread: resolve here, unbounded
                del _LOOKUPS[key]
                return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    left = deadline - _monotonic()
    if not lookup.done.wait(max(0.0, left)):
        raise _ResolveTimeout("name resolution timed out")
    with _LOOKUPS_LOCK:
        if _LOOKUPS.get(key) is lookup:
            del _LOOKUPS[key]  # taken: the next try asks the resolver again
    if lookup.error is not None:
        raise lookup.error
    return lookup.answer


def _http(url: str, timeout: float) -> Outcome:
    """One ``GET``; the status line is all that is read. The whole try (name, connect, TLS
    handshake, request, status line) ends by ``timeout``: a per-read timeout alone never fires
    while a server (or a local user who bound the port first) sends a byte now and then."""
    import time

    try:
        parts, host, port = http_address(url)
    except ValueError as error:  # the record checks its URL: one from elsewhere may not be
        return Outcome(done=False, missing=(f"{url} (cannot be probed: {error})",))
    deadline = time.monotonic() + timeout
    try:
        line = _status_line(parts, host, port, deadline)
    except OSError as error:
        return Outcome(done=False, missing=(f"{url} ({_reason(error)})",))
    words = line.split(None, 2)  # b"HTTP/1.1", b"200", b"OK"
    if len(words) < 2 or not words[0].startswith(b"HTTP/") or not words[1].isdigit():
        return Outcome(done=False, missing=(f"{url} (not an HTTP response)",))
    status = int(words[1])
    if 200 <= status < 300:
        return _DONE
    return Outcome(done=False, missing=(f"{url} (HTTP {status})",))


def http_address(url: str) -> tuple[urllib.parse.SplitResult, str, int]:
    """``url`` split, its host and the port to connect to; ValueError saying what is wrong
    (``Invalid IPv6 URL``, ``Port out of range 0-65535``, ``no host``, ``port 0``)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    port = parts.port
    if not parts.hostname:
        raise ValueError("no host")
    if port == 0:
        raise ValueError("port 0")
    return parts, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def _status_line(parts: urllib.parse.SplitResult, host: str, port: int, deadline: float) -> bytes:
    """The first line of the answer to ``GET`` ``parts`` (at most 1 KiB), read by ``deadline``;
    TimeoutError past it."""
    https = parts.scheme == "https"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    request = (
        f"GET {target} HTTP/1.1\r\nHost: {parts.netloc.rpartition('@')[2]}\r\n"
        "User-Agent: noderole-probe\r\nConnection: close\r\n\r\n"
    ).encode()
    sock = _connect(_addresses(host, port, deadline), deadline)
    try:
        if https:
            import ssl

            # Like a kubelet HTTPS probe: local services at boot serve certificates from CAs
            # this process does not (yet) trust, and the probe sends nothing secret.
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            sock.settimeout(_left(deadline))  # the handshake, as a whole
            sock = context.wrap_socket(sock, server_hostname=host or None)
        sock.settimeout(_left(deadline))
        sock.sendall(request)
        answer = b""
        while b"\n" not in answer and len(answer) < 1024:
            sock.settimeout(_left(deadline))
            chunk = sock.recv(1024 - len(answer))
            if not chunk:
                break
            answer += chunk
        return answer.partition(b"\n")[0].rstrip(b"\r")
    finally:
        sock.close()


def _connect(addresses: list[tuple[Any, ...]], deadline: float) -> socket.socket:
    """A socket connected to the first of ``addresses`` that accepts by ``deadline`` (what
    ``socket.create_connection`` does, on addresses already resolved); the last error."""
    import socket

    error: OSError = OSError("no address")
    for family, kind, proto, _, address in addresses:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(address)
        except OSError as failed:
            sock.close()
            error = failed
            if isinstance(failed, TimeoutError):
                break  # the try's time is up: no time left for the next address
            continue
        return sock
    raise error


def _left(deadline: float) -> float:
    left = deadline - _monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def _monotonic() -> float:
    import time

    return time.monotonic()


def _command(
    probe: CommandProbe,
    timeout: float,
    environment: Mapping[str, str] | None,
    started: Callable[[subprocess.Popen[bytes]], None] | None,
) -> Outcome:
    import subprocess

    label = f"`{' '.join(probe.shown or probe.argv)}`"
    try:
        proc = _spawn(probe.argv, environment)
    except OSError as error:
        return Outcome(done=False, missing=(f"{label} (cannot run: {_not_run(probe, error)})",))
    if proc is None:
        return Outcome(done=False, missing=(f"{label} (cancelled)",))
    try:
        if started is not None:
            started(proc)
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return Outcome(done=False, missing=(f"{label} (still running at the deadline)",))
    except ValueError:  # the caller gave up and closed our pipe: not ready
        kill_group(proc)
        return Outcome(done=False, missing=(f"{label} (cancelled)",))
    except BaseException:
        # Ctrl-C in this thread: the attempt, in a session of its own, never got the terminal's
        # SIGINT, and nobody would end it at the deadline any more.
        kill_group(proc)
        raise
    finally:
        _RUNNING.discard(proc)
    if proc.returncode == 0:
        return _DONE
    last = next(
        (ln for ln in reversed(err.decode(errors="replace").splitlines()) if ln.strip()), ""
    )
    detail = f": {last.strip()[:200]}" if last else ""
    return Outcome(done=False, missing=(f"{label} (exit {proc.returncode}{detail})",))


def _spawn(
    argv: tuple[str, ...], environment: Mapping[str, str] | None
) -> subprocess.Popen[bytes] | None:
    """Start a command attempt, in a session of its own, and enter it in :data:`_RUNNING`; None
    when the process is leaving (:func:`end_attempts`), which no attempt may outlive.

    Between the fork and the entry the attempt runs unknown, and a signal landing there must
    not lose it: :func:`end_attempts` waits for a thread starting one, or, called by a signal
    handler in this very thread, leaves it to this function to end it (and the process) once
    it is known; a Ctrl-C in the main thread is held until then, and raised once it is ended.
    """
    import signal
    import subprocess

    me = _thread.get_ident()
    interrupts: list[int] = []
    held = False
    proc = None
    try:
        # In _STARTING before looking at _leaving, and in _RUNNING before leaving _STARTING:
        # end_attempts, which sets _leaving first, either sees this thread starting (and waits
        # for it) or this thread sees _leaving (and starts nothing).
        _STARTING.add(me)
        held = _hold_interrupts(interrupts)
        if not _leaving:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=dict(environment) if environment is not None else None,
                # Own session: a timed-out try is killed with its children, not just the shell.
                start_new_session=True,
            )
            _RUNNING.add(proc)
    finally:
        _STARTING.discard(me)
        if held:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if interrupts:  # raised now, the attempt known and ended (not lost inside Popen)
            _end(proc)
            raise KeyboardInterrupt
    if _leaving:  # end_attempts ran meanwhile, in a signal handler (before the fork, perhaps)
        _end(proc)
        if _dying_of is not None:  # its handler is the default one again: die of it now
            os.kill(os.getpid(), _dying_of)
        return None
    return proc


def _hold_interrupts(noted: list[int]) -> bool:
    """In the main thread, under Python's own SIGINT handler: note a Ctrl-C in ``noted`` rather
    than raise KeyboardInterrupt, until the handler is put back. False elsewhere: in another
    thread (the main thread takes the interrupt, and its way out waits for this start), or
    under a handler of the caller's own, left alone."""
    import signal

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False
    try:
        signal.signal(signal.SIGINT, lambda number, frame: noted.append(number))
    except ValueError:  # not the main thread
        return False
    return True


def _end(proc: subprocess.Popen[bytes] | None) -> None:
    """Kill and reap a try, then forget it: a try leaves :data:`_RUNNING` only once killed, so
    that another thread's :func:`end_attempts` never finds it gone while it still runs."""
    if proc is not None:
        kill_group(proc)
        _RUNNING.discard(proc)


def end_attempts(*, dying_of: int | None = None) -> bool:
    """SIGKILL every command attempt under way in this process, which is leaving (Ctrl-C, an
    error, a SIGTERM or SIGHUP: ``dying_of``) while threads were waiting on attempts: exiting
    would leave them running, reparented to init, until they end on their own.

    From then on no attempt starts. An attempt that another thread is starting (forked,
    perhaps, not yet known) is waited for, up to :data:`START_BOUND` seconds, then killed with
    the rest. One that the calling thread itself is starting (a signal handler run in the
    middle of its ``Popen``) is not known yet: False is returned, and the start ends it once it
    is, then the process with ``dying_of`` (whose handler the caller has put back to the
    default by then); True otherwise.
    """
    import signal
    import time

    global _leaving, _dying_of
    _leaving = True
    me = _thread.get_ident()
    deadline = time.monotonic() + START_BOUND
    while _STARTING - {me} and time.monotonic() < deadline:
        time.sleep(0.001)
    for proc in list(_RUNNING):  # a copy made under the GIL: the threads may discard meanwhile
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if me in _STARTING:
        _dying_of = dying_of
        return False
    return True


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a command attempt's process group, and every other group of its session (what
    moved to a group of its own: a ``timeout`` it runs), and reap it."""
    import signal
    import subprocess

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode is None:  # not reaped: the number of its session is still its own
        from noderole.supervisor import _proc

        members = _proc.session_members(proc.pid)
        _proc.signal_groups(members, signal.SIGKILL, skip=(proc.pid,))
    try:
        proc.communicate(timeout=1.0)
    except (subprocess.TimeoutExpired, ValueError):
        # A grandchild that left the group still holds stderr open: stop reading, reap the child.
        if proc.stderr is not None:
            with contextlib.suppress(OSError):
                proc.stderr.close()
        proc.wait()


def _not_run(probe: CommandProbe, error: OSError) -> str:
    """Why the probe's command could not be started: a limit on processes, or what keeps the
    kernel from running the program (read from the file when it is named by its path)."""
    from noderole.supervisor import _execerror, _proclimit

    if _proclimit.is_exhausted(error):
        return _proclimit.explain(error)
    if "/" in probe.argv[0]:
        return _execerror.why_not(probe.argv[0], error)
    return _reason(error)


def _reason(error: BaseException) -> str:
    if isinstance(error, _ResolveTimeout):
        return str(error)
    if isinstance(error, TimeoutError):  # a socket's, or the TLS handshake's own words
        return "timed out"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return str(error) or type(error).__name__


# --------------------------------------------------------------------------- wire form

_KINDS: dict[str, type[Probe]] = {
    "paths": PathProbe,
    "socket": SocketProbe,
    "tcp": TcpProbe,
    "http": HttpProbe,
    "command": CommandProbe,
}


def probe_to_wire(probe: Probe) -> dict[str, object]:
    """The JSON form of a probe (``{"kind": "tcp", "host": ..., "port": ...}``)."""
    kind = next(k for k, cls in _KINDS.items() if isinstance(probe, cls))
    wire: dict[str, object] = {"kind": kind}
    for name in fields(type(probe)):
        value = getattr(probe, name)
        wire[name] = list(value) if isinstance(value, tuple) else value
    return wire


def probe_from_wire(data: object) -> Probe:
    """Decode :func:`probe_to_wire`'s form; ValueError names the bad key."""
    if not isinstance(data, dict):
        raise ValueError(f"a probe must be a JSON object, got {data!r}")
    kind = data.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"probe kind {kind!r} is unknown (use one of {', '.join(_KINDS)})")
    known = fields(cls)
    unknown = sorted(set(data) - set(known) - {"kind"})
    if unknown:
        raise ValueError(f"{kind} probe: unknown key {unknown[0]!r}")
    values: dict[str, object] = {}
    for name, value in data.items():
        if name != "kind":
            values[name] = _field(str(kind), name, value)
    try:
        probe = cls(**values)  # type: ignore[arg-type]
    except TypeError as e:
        raise ValueError(f"{kind} probe: {e}") from None
    _check(probe)
    return probe


def _field(kind: str, name: str, value: object) -> object:
    if name in ("paths", "labels", "argv", "shown"):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{kind} probe: {name!r} must be a list of strings, got {value!r}")
        return tuple(value)
    if name == "port":
        if type(value) is not int or not 1 <= value <= 65535:
            raise ValueError(f"{kind} probe: 'port' must be an integer 1-65535, got {value!r}")
        return value
    if name == "readable":
        if not isinstance(value, bool):
            raise ValueError(f"{kind} probe: 'readable' must be true or false, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{kind} probe: {name!r} must be a string, got {value!r}")
    return value


def _check(probe: Probe) -> None:
    if isinstance(probe, PathProbe):
        if not probe.paths:
            raise ValueError("paths probe: 'paths' must not be empty")
        if probe.require not in ("all", "any"):
            raise ValueError(f"paths probe: 'require' must be all or any, got {probe.require!r}")
        if probe.labels and len(probe.labels) != len(probe.paths):
            raise ValueError("paths probe: 'labels' must name every path")
    elif isinstance(probe, CommandProbe) and not probe.argv:
        raise ValueError("command probe: 'argv' must not be empty")
    elif isinstance(probe, HttpProbe):
        if not probe.url.startswith(("http://", "https://")):
            raise ValueError(f"http probe: 'url' must be http:// or https://, got {probe.url!r}")
        try:
            http_address(probe.url)
        except ValueError as error:
            raise ValueError(f"http probe: 'url' {probe.url!r} cannot be probed: {error}") from None
