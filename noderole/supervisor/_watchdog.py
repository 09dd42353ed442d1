"""The watchdog: a SIGKILLed supervisor's services must not run on unsupervised.

The daemon forks one watchdog, in a session of its own, before it serves. The watchdog does
nothing but wait on a pidfd of the daemon. When the daemon is gone it reads the state file and
SIGKILLs every process of every session the daemon recorded that still runs, verified by start
time (:func:`noderole.supervisor._state.kill_leftovers`): grandchildren included, and those that
moved to a process group of their own (only a process that called setsid is not followed).
After a clean exit the daemon has stopped everything itself (and ended the watchdog), so there
is nothing to kill.

The state file is not the watchdog's only source: the daemon also tells it, over a pipe, the
process (the leader of its session and group) of every child it starts (and forgets every one
that ends), before the start is complete. A respawn whose state could not be written (``/run``
full) is still known to the watchdog; a start the daemon cannot tell it about is undone
(:class:`Groups`).

A fork, not a new interpreter: its memory pages are the daemon's, shared copy-on-write, so the
watchdog costs the node a few hundred kB of proportional memory (PSS) instead of a second
interpreter's ~5 MB. It closes every descriptor it inherited (above all the daemon's lock, which
must die with the daemon), names itself ``noderole-supervisor-watchdog`` in ``ps``, turns the
garbage collector off (a collection would touch, and so copy, the daemon's pages) and ends with
``os._exit``.

Why not ``PR_SET_PDEATHSIG`` on each child: it must be set in the child between fork and exec,
which costs a full ``fork`` of the daemon and Python code in the child (~2.9 ms a start,
measured), or an extra ``setpriv`` exec (~1.1 ms); and it reaches only the direct child, never
its grandchildren. The watchdog costs one process for the node and nothing per start.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal

from noderole.supervisor import _log, _proc, _state, _title
from noderole.supervisor._status import ServiceStatus

__all__ = ["NAME", "Groups", "StateCopy", "fork_watchdog", "wait_for_exit"]

NAME = "noderole-supervisor-watchdog"
"""Its name in ``ps`` (first word of its command line) and in the log."""


class StateCopy:
    """The last readable copy of the state file, refreshed when the file changes.

    Looked at each second while the daemon lives (a ``stat``; the file is read only when it
    changed), so that what the daemon last recorded is known even if the file is gone or broken
    by the time the daemon dies.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.raw = b""
        self._seen: tuple[int, int] | None = None

    def refresh(self) -> None:
        try:
            st = os.stat(self.path)
            seen = (st.st_mtime_ns, st.st_size)
            if seen != self._seen:
                raw = _state._read_regular(self.path)  # a FIFO there must not stop the watch
                if raw:
                    self.raw, self._seen = raw, seen
        except OSError:
            pass


class Groups:
    """The process groups the daemon told us about over a pipe: name -> (pgid, start ticks).

    One JSON line per event, ``[name, pgid, ticks]`` for a start and ``[name, null, null]`` for
    an end. Newer than the state file (the daemon writes the pipe before the file).
    """

    def __init__(self, fd: int, known: dict[str, tuple[int, int]]) -> None:
        self.fd = fd
        self.known = dict(known)
        self._partial = b""

    def read(self) -> bool:
        """Take in whatever the daemon wrote (never blocks); False once the pipe is closed."""
        while True:
            try:
                data = os.read(self.fd, 65536)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                data = b""
            if not data:
                return False
            *lines, self._partial = (self._partial + data).split(b"\n")
            for line in lines:
                try:
                    name, pgid, ticks = json.loads(line)
                except ValueError:
                    continue
                if isinstance(pgid, int) and isinstance(ticks, int):
                    self.known[str(name)] = (pgid, ticks)
                else:
                    self.known.pop(str(name), None)


_NAMES: dict[str, str] = {}
"""Each service name as JSON: a crash-looping node sends a line for every respawn."""


def encode_group(name: str, pgid: int | None, ticks: int | None) -> bytes:
    """The daemon's line for :class:`Groups`: ``json.dumps([name, pgid, ticks])``."""
    quoted = _NAMES.get(name)
    if quoted is None:
        quoted = _NAMES[name] = json.dumps(name)
    return f"[{quoted}, {_number(pgid)}, {_number(ticks)}]\n".encode()


def _number(value: int | None) -> str:
    return "null" if value is None else str(int(value))


def wait_for_exit(
    pid: int, start_ticks: int, state: StateCopy | None = None, groups: Groups | None = None
) -> None:
    """Block until process ``pid`` (started at ``start_ticks``) has exited."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return  # already gone
    try:
        # Checked after opening the pidfd: a pid reused by another process is not waited for.
        st = _proc.proc_stat(pid)
        if st is None or not st.running or st.start_ticks != start_ticks:
            return
        watched = [fd] if groups is None else [fd, groups.fd]
        while True:
            ready = select.select(watched, [], [], 1.0)[0]
            if groups is not None and groups.fd in ready and not groups.read():
                watched = [fd]  # the daemon closed its end: nothing more will come
            if fd in ready:
                return
            if not ready and state is not None:
                state.refresh()
    finally:
        os.close(fd)


def fork_watchdog(
    run_dir: str,
    state_path: str,
    daemon_ticks: int,
    known: dict[str, tuple[int, int]] | None = None,
) -> tuple[int, int]:
    """Fork the watchdog of this (daemon) process, knowing the groups ``known`` already.

    Returns its pid once it is under way, and the (non-blocking) write end of the pipe that
    tells it each new group (:func:`encode_group`).
    """
    daemon_pid = os.getpid()
    # Everything alive now is never collected again in the daemon (gc.freeze): a collection
    # writes into every object it visits, which would copy the pages the watchdog shares.
    gc.freeze()
    r, w = os.pipe()
    groups_r, groups_w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.fork()
    except OSError:  # no process to be had (a full pids.max): nothing of this fork stays open
        for fd in (r, w, groups_r, groups_w):
            os.close(fd)
        raise
    if pid:
        os.close(w)
        os.close(groups_r)
        try:
            os.read(r, 1)  # renamed and waiting: from now on ``ps`` shows what it is
        finally:
            os.close(r)
        os.set_blocking(groups_w, False)
        return pid, groups_w
    code = 1
    try:
        gc.disable()
        os.setsid()
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        # Above all the daemon's lock: it must be free the moment the daemon dies.
        low = 3
        for keep in sorted((w, groups_r)):
            os.closerange(low, keep)
            low = keep + 1
        os.closerange(low, 1 << 20)
        os.set_blocking(groups_r, False)
        groups = Groups(groups_r, known or {})
        for fd in (0, 1):
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, fd)
            os.close(null)
        _title.set_title(_title.title_words(NAME, run_dir))
        _log.set_role(NAME)
        copy = StateCopy(state_path)
        copy.refresh()
        os.write(w, b"1")
        os.close(w)
        wait_for_exit(daemon_pid, daemon_ticks, copy, groups)
        # The descriptor inherited at the fork may name a copy the daemon has rotated since (or
        # removed, or logrotate moved aside): the report goes to the log's path.
        _log.reopen()
        groups.read()
        code = watch_over(daemon_pid, copy, groups.known)
    except BaseException:
        import traceback

        _log.log_error("internal error:\n" + traceback.format_exc())
    finally:
        os._exit(code)


def watch_over(
    daemon_pid: int, copy: StateCopy, known: dict[str, tuple[int, int]] | None = None
) -> int:
    """The daemon is gone: kill what it recorded as running, unless a newer daemon took over.

    ``known`` (what the daemon said over the pipe) wins over the state file, which may be stale
    when the daemon could not write it.
    """
    copy.refresh()  # the daemon's last word, if the file is still there
    try:
        state = _state.parse_state(copy.raw) if copy.raw else _state.State()
    except ValueError as e:
        state = _state.State()
        if not known:
            _log.log(f"supervisor {daemon_pid} died, its state unreadable ({e}): nothing killed")
            return 1
    if state.supervisor_pid not in (None, daemon_pid):
        return 0  # a newer daemon already took over (and recovered what was left)
    for name, (pgid, ticks) in (known or {}).items():
        status = state.services.get(name) or ServiceStatus(name=name, state="running")
        state.services[name] = status.but(pid=pgid, start_ticks=ticks)
    killed = _state.kill_leftovers(state)
    for name, pids in sorted(killed.items()):
        _log.log(f"supervisor {daemon_pid} died; killed {name}: {' '.join(map(str, pids))}")
    return 0
