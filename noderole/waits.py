"""Bounded waits that return as soon as their condition holds: paths by inotify, others by polling.

The seed waits with ``while ...; do sleep 2; done``: it notices a file up to 2 s late and cannot be
tested without waiting for real. Here:

- **Paths** (:class:`~noderole.records.WaitForPaths`) block on an inotify descriptor that watches
  the deepest existing ancestor directory of every missing path, for entries created or moved in
  and for attribute changes (``chmod`` makes a file readable). When a directory on the way appears,
  the next round watches deeper. The condition is re-checked after every (re)arming, because
  whatever appeared between the check and the watch sent no event we could see, and once a second
  in case an event was missed (a rename higher up, a filesystem without inotify).
- **Sockets, TCP ports, HTTP URLs and commands** have nothing to watch, so they are polled: the
  first retry after 5 ms, the interval doubling to 15 ms (commands: 100 ms, since each run forks
  a process). Measured on a 2-core VM: a refused loopback connect plus the wake-up costs about
  0.3 ms of CPU, so a TCP wait uses about 2 % of a core and reacts within 15 ms p95; a 10 ms cap
  reacted within 10 ms but cost 3 %. A unix socket whose file does not exist yet is watched by
  inotify until it appears, and only then polled.

Every timeout is computed from ``clock.monotonic()`` and every pause goes through
``clock.wait_readable``, so a :class:`~noderole.clock.FakeClock` runs a 120 s timeout at once. Each
wait owns its inotify descriptor and gives it up on every way out (a background thread does the
slow ``close``); waits share no other state, so any number may run in threads at once.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeAlias

from noderole.clock import Clock
from noderole.errors import WaitTimeout
from noderole.records import (
    Wait,
    WaitForCommand,
    WaitForHttp,
    WaitForPaths,
    WaitForSocket,
    WaitForTcp,
)
from noderole.root import NodeRoot

if TYPE_CHECKING:
    import ctypes

    from noderole.stepcontext import Cancel
    from noderole.supervisor import probes

__all__ = [
    "CANCEL_CHECK",
    "COMMAND_POLL_CAP",
    "MIN_PROGRESS_EVERY",
    "POLL_CAP",
    "POLL_FIRST",
    "SAFETY_RECHECK",
    "flush_closes",
    "missing",
    "probe_for",
    "run_wait",
]

POLL_FIRST = 0.005
"""Seconds before the first retry of a polled wait."""
POLL_CAP = 0.015
"""Longest pause between tries of a socket, TCP or HTTP wait (the interval doubles up to it)."""
COMMAND_POLL_CAP = 0.100
"""Longest pause between runs of a command wait: each run forks and execs, about 2 ms of CPU."""
SAFETY_RECHECK = 1.0
"""Seconds between re-checks of an inotify-driven wait when no event arrives."""
MIN_PROGRESS_EVERY = 1.0
"""The shortest time between two ``still waiting`` lines (the lines count whole seconds): a
shorter positive ``progress_every`` counts as this."""
CANCEL_CHECK = 0.05
"""Longest pause of a cancellable wait between looks at its :class:`Cancel` token."""
ATTEMPT_TIMEOUT = 2.0
"""Longest single TCP connect or HTTP request, so a server that hangs cannot eat the whole wait
(the probes' own ``ATTEMPT_TIMEOUT``, repeated so that importing this module, as every apply's
engine does for :class:`Cancel`, imports neither the probes nor ctypes)."""

# inotify(7) constants (linux/inotify.h); IN_NONBLOCK and IN_CLOEXEC equal the O_ flags.
_IN_ATTRIB = 0x00000004
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_ONLYDIR = 0x01000000
_WATCH_MASK = _IN_CREATE | _IN_MOVED_TO | _IN_ATTRIB | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR
# IN_CLOSE_WRITE is left out on purpose: "exists and is readable" cannot change when a file is
# closed, and in a busy directory (/run, /var/log) it would wake the wait for nothing.


def run_wait(
    wait: Wait,
    *,
    root: NodeRoot,
    clock: Clock,
    progress: Callable[[str], None] | None = None,
    cancel: Cancel | None = None,
    progress_every: float = 0.0,
) -> float:
    """Block until ``wait``'s condition holds; return the seconds waited.

    ``progress(text)`` is called when the condition does not hold at the first look, with what
    is awaited (``waiting for /etc/rancher/k3s/k3s.yaml (up to 120s)``), and then, when
    ``progress_every`` is positive, every ``progress_every`` seconds with the time spent
    (``still waiting for ... (10s of 120s)``, as OpenRC's ``ewaitfile``), at most once per
    :data:`MIN_PROGRESS_EVERY`. Raises
    :class:`~noderole.errors.WaitTimeout` when ``wait.timeout`` passes first; its message is
    ``wait.message`` with ``{elapsed}`` and ``{missing}`` filled in, or names what is missing.
    Raises :class:`WaitCancelled` soon (within :data:`CANCEL_CHECK`) after ``cancel`` is.
    """
    start = clock.monotonic()
    if isinstance(wait, WaitForPaths) and _paths_there(wait, root):
        # Every re-apply: the paths are there at the first look. The probes module (and its
        # record classes) is imported only by a wait that has to look again.
        return clock.monotonic() - start
    deadline = start + wait.timeout
    probe = _prober(wait, root)
    cap = COMMAND_POLL_CAP if isinstance(wait, WaitForCommand) else POLL_CAP
    interval = POLL_FIRST
    announced = False
    if progress_every > 0:
        # A step below the clock's resolution (1e-12 at a monotonic clock of days) never moved
        # the next report past the clock, and the wait spun for good.
        progress_every = max(progress_every, MIN_PROGRESS_EVERY)
    next_report = start + progress_every
    inotify: _Inotify | None = None
    inotify_failed = False
    try:
        while True:
            state = probe(deadline - clock.monotonic())
            if not state.done and state.watch and not inotify_failed:
                if inotify is None:
                    inotify = _Inotify.open()
                    inotify_failed = inotify is None
                if inotify is not None:
                    for path in state.watch:
                        inotify.watch_around(path)
                    # Whatever appeared between the look and the watch sent no event we saw.
                    state = probe(deadline - clock.monotonic())
            if state.done:
                return clock.monotonic() - start
            if cancel is not None:
                cancel.check()
            now = clock.monotonic()
            if not announced:
                announced = True
                if progress is not None:
                    progress(f"waiting for {', '.join(state.missing)} (up to {wait.timeout:g}s)")
            elif progress is not None and progress_every > 0 and now >= next_report:
                progress(
                    f"still waiting for {', '.join(state.missing)} "
                    f"({now - start:.0f}s of {wait.timeout:g}s)"
                )
            if progress_every > 0 and next_report <= now:
                next_report += (int((now - next_report) // progress_every) + 1) * progress_every
            if now >= deadline:
                raise WaitTimeout(_timeout_message(wait, now - start, state.missing))
            if state.watch and inotify is not None:
                pause = SAFETY_RECHECK
            else:
                pause, interval = interval, min(cap, interval * 2)
            if cancel is not None:
                pause = min(pause, CANCEL_CHECK)
            if progress_every > 0:
                pause = min(pause, next_report - now)
            fd = inotify.fd if inotify is not None else None
            if clock.wait_readable(fd, min(deadline - now, pause)) and inotify is not None:
                inotify.drain()
    finally:
        if inotify is not None:
            inotify.close()


def missing(wait: Wait, *, root: NodeRoot) -> list[str]:
    """What ``wait`` still lacks right now (node paths or endpoints, with the reason); [] if none.

    Looks once without waiting; a TCP, HTTP or command check makes one bounded attempt.
    """
    state = _prober(wait, root)(ATTEMPT_TIMEOUT)
    return [] if state.done else list(state.missing)


# --------------------------------------------------------------------------- probes


def probe_for(wait: Wait, root: NodeRoot) -> probes.Probe:
    """The probe that checks ``wait``'s condition under ``root`` (also used for readiness).

    Paths are resolved under the root and named by their node paths in messages; a command's
    argv[0] is the root's own if the root holds it, else the machine's (``/bin/sh``).
    """
    from noderole.supervisor import probes

    if isinstance(wait, WaitForPaths):
        return probes.PathProbe(
            paths=tuple(root.local(p) for p in wait.paths),
            labels=wait.paths,
            require=wait.require,
            readable=wait.readable,
        )
    if isinstance(wait, WaitForSocket):
        return probes.SocketProbe(path=root.local(wait.path), label=wait.path)
    if isinstance(wait, WaitForTcp):
        return probes.TcpProbe(host=wait.host, port=wait.port)
    if isinstance(wait, WaitForHttp):
        return probes.HttpProbe(url=wait.url)
    if isinstance(wait, WaitForCommand):
        argv = (_executable(root, wait.argv[0]), *wait.argv[1:])
        return probes.CommandProbe(argv=argv, shown=wait.argv)
    raise TypeError(f"not a wait record: {wait!r}")


def _paths_there(wait: WaitForPaths, root: NodeRoot) -> bool:
    """Whether ``wait``'s paths are there now, as its probe would say (without the probes)."""
    from noderole.supervisor._pathcheck import lacking

    local = [root.local(p) for p in wait.paths]
    missing, _ = lacking(local, wait.paths, require=wait.require, readable=wait.readable)
    return not missing


def _prober(wait: Wait, root: NodeRoot) -> _Probe:
    probe = probe_for(wait, root)
    env = {**os.environ, **root.environment()} if isinstance(wait, WaitForCommand) else None
    return functools.partial(_look, probe, env)


def _look(probe: probes.Probe, env: dict[str, str] | None, left: float) -> probes.Outcome:
    from noderole.supervisor import probes

    return probes.attempt(probe, left=left, environment=env)


_Probe: TypeAlias = "Callable[[float], probes.Outcome]"
"""One look at the condition; the argument is the time left (bounds a network try or a command)."""


def _executable(root: NodeRoot, node_path: str) -> str:
    """argv[0] under the root; a tool the root does not hold (``/bin/sh``) is the machine's own."""
    local = root.local(node_path)
    return local if root.is_real or os.path.exists(local) else node_path


def _timeout_message(wait: Wait, waited: float, lacking: Iterable[str]) -> str:
    elapsed = round(waited)
    joined = ", ".join(lacking)
    if wait.message is not None:
        try:
            return wait.message.format(elapsed=elapsed, missing=joined)
        except (KeyError, IndexError, ValueError):
            # A message with stray braces is shown as written rather than lost.
            return f"{wait.message} ({elapsed}s; missing: {joined})"
    if isinstance(wait, WaitForPaths):
        what = "none present" if wait.require == "any" and len(wait.paths) > 1 else "still missing"
        return f"{what} after {elapsed}s: {joined}"
    return f"still not ready after {elapsed}s: {joined}"


# --------------------------------------------------------------------------- inotify


@functools.cache
def _libc() -> ctypes.CDLL | None:
    import ctypes  # here: only a path wait that finds its path missing watches with inotify

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_init1.restype = ctypes.c_int
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_add_watch.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


class _Inotify:
    """One inotify descriptor, owned by one wait."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def open(cls) -> _Inotify | None:
        """A new descriptor, or None when inotify is unavailable (the wait then polls)."""
        libc = _libc()
        if libc is None:
            return None
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        # EMFILE (fs.inotify.max_user_instances, 128 by default) or ENOSYS: fall back to polling.
        return None if fd < 0 else cls(fd)

    def watch_around(self, path: str) -> None:
        """Watch the directories whose events can change whether ``path`` (absolute, on this
        machine) is there."""
        self._watch_deepest(os.path.dirname(path))
        if os.path.islink(path):
            # A dangling link becomes "there" when its target appears, maybe in another directory.
            self._watch_deepest(os.path.dirname(os.path.realpath(path)))

    def _watch_deepest(self, directory: str) -> None:
        import ctypes

        libc = _libc()
        assert libc is not None
        watched: str | None = None
        # Until stable: a directory created between the look and the watch sent its event to
        # nobody, so after each watch look again and go deeper if the tree grew meanwhile.
        for _ in range(64):
            existing = _deepest_directory(directory)
            if existing == watched:
                return
            # Adding a watch twice returns the same descriptor: re-arming costs one syscall.
            if libc.inotify_add_watch(self.fd, os.fsencode(existing), _WATCH_MASK) >= 0:
                watched = existing
            elif ctypes.get_errno() not in (errno.ENOENT, errno.ENOTDIR):
                return  # EACCES, ENOSPC (watch limit): the periodic re-check still sees it.
            # ENOENT/ENOTDIR: removed between the look and the watch; look again.

    def drain(self) -> None:
        """Discard pending events: which one woke us does not matter, the re-check decides."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 65536):
                pass

    def close(self) -> None:
        """Hand the descriptor to the closer thread (see :class:`_Closer`)."""
        _CLOSER.close(self.fd)


class _Closer:
    """Closes inotify descriptors off the waiting thread.

    Once watches were added, ``close()`` waits for the kernel to reap them (an SRCU grace period):
    measured here at 5-20 ms, which would double a path wait's reaction time. One daemon thread
    closes them instead, in order, and exits after a while with nothing to do.
    """

    IDLE = 10.0
    """Seconds the thread lingers without work before exiting."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._fds: list[int] = []
        self._thread: threading.Thread | None = None

    def close(self, fd: int) -> None:
        with self._cond:
            if self._thread is None:
                thread = threading.Thread(
                    target=self._run, name="noderole-inotify-closer", daemon=True
                )
                try:
                    thread.start()
                except RuntimeError:  # no thread to be had (a full pids.max): close it here
                    os.close(fd)
                    return
                self._thread = thread
            self._fds.append(fd)
            self._cond.notify_all()

    def flush(self, timeout: float = 10.0) -> bool:
        """Block until every handed-over descriptor is closed; False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._fds, timeout)

    def after_fork_in_child(self) -> None:
        """A forked child has the descriptors but not the thread: close them here, now."""
        self._cond = threading.Condition()
        pending, self._fds, self._thread = self._fds, [], None
        for fd in pending:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._cond.wait_for(lambda: bool(self._fds), self.IDLE):
                    self._thread = None
                    return
                fd = self._fds[0]
            try:
                os.close(fd)
            finally:
                with self._cond:
                    self._fds.pop(0)
                    self._cond.notify_all()


_CLOSER = _Closer()
os.register_at_fork(after_in_child=_CLOSER.after_fork_in_child)


def flush_closes(timeout: float = 10.0) -> bool:
    """Block until the inotify descriptors of finished waits are closed; False on timeout.

    They close in the background (see :class:`_Closer`); tests that count open descriptors call
    this first.
    """
    return _CLOSER.flush(timeout)


def _deepest_directory(path: str) -> str:
    while not os.path.isdir(path) and path != os.path.dirname(path):
        path = os.path.dirname(path)
    return path
