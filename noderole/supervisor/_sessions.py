"""The sessions of the services' processes, looked up in /proc as seldom as the job allows.

A service's process leads a session of its own (its pid is the session's id, and its group's).
What it starts stays in that session whatever process group it moves to: GNU ``timeout`` calls
setpgid, a shell with job control (``set -m``, ``bash -m``) puts each job in a group of its own,
perl's ``setpgrp`` does it by hand. Only setsid leaves the session, as a containerd shim does on
purpose. So a stop, and the exit of a service's process, end every process of its session; a
signal to its process group alone left the others running, and a crash loop piled them up.

The kernel has no call that lists a session: /proc is listed (:func:`_proc.list_sessions`, about
a millisecond a thousand processes), and one listing serves many looks:

- every look in one turn of the loop uses the same listing, taken after the turn's events (a
  wave of a thousand services stopping together exits within a few turns);
- the looks that follow exits, before the respawns, are put together and spaced so that they
  take at most :data:`SWEEP_SHARE` of the daemon's time, however many services crash-loop.

A session's number is its leader's pid, which cannot be given to another process while the
leader is unreaped: the daemon keeps an exited process unreaped until its session is empty, as it
did for its group. Standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from noderole.supervisor import _proc
from noderole.supervisor._loop import Loop, Timer, guarded

__all__ = ["SWEEP_SHARE", "Sessions"]

SWEEP_SHARE = 0.1
"""The share of the daemon's time the looks after exits may take, at most: each listing of /proc
they wait for comes no sooner than nine times its predecessor's cost (the daemon's CPU time, not
the wall time a busy machine stretches) after it ended."""


class Sessions:
    """The listing of /proc the looks of this turn share, and the looks waiting for the next."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop
        self.described: set[int] = set()
        """Sessions whose members each listing reads (those of units stopping or sweeping)."""
        self.pids: dict[int, list[int]] = {}
        self.members: dict[int, list[_proc.ProcStat]] = {}
        self.taken_ns = -1
        """When the listing in :attr:`pids` and :attr:`members` began (monotonic ns)."""
        self.cost = 0.0
        self.ended = 0.0
        self.listings = 0
        self.waiting: dict[object, Callable[[], None]] = {}
        self.timer: Timer | None = None

    def watch(self, sid: int) -> None:
        """Read the members of session ``sid`` at every listing, until :meth:`forget`."""
        self.described.add(sid)

    def forget(self, sid: int) -> None:
        self.described.discard(sid)

    def _take(self) -> None:
        began, cpu = time.monotonic_ns(), time.thread_time()
        self.pids, self.members = _proc.list_sessions(self.described)
        self.cost = time.thread_time() - cpu
        self.taken_ns = began
        self.ended = time.monotonic()
        self.listings += 1

    def look(self, sid: int, *, after_ns: int = 0) -> list[_proc.ProcStat]:
        """The running processes of the watched session ``sid`` but its leader, as a listing of
        this turn saw them, taken after ``after_ns`` (when the leader was known to have exited).

        An empty answer is final once the leader has exited: nothing can join the session.
        """
        if self.taken_ns <= max(self.loop.woke_ns, after_ns) or sid not in self.members:
            self.watch(sid)
            self._take()
        return self.members[sid]

    def now(self, sid: int) -> list[_proc.ProcStat]:
        """The processes of session ``sid`` but its leader, as this turn's listing names them
        (read now if the listing did not): who to signal, never proof that none is left."""
        if self.taken_ns <= self.loop.woke_ns:
            self._take()
        if sid in self.members:
            return self.members[sid]
        found = []
        for pid in self.pids.get(sid, ()):
            st = _proc.proc_stat(pid) if pid != sid else None
            if st is not None and st.running and st.session == sid:
                found.append(st)
        return found

    def soon(self, key: object, callback: Callable[[], None]) -> None:
        """Call ``callback`` (once, replacing any other of ``key``) after this turn's events,
        together with every other one waiting, no sooner than the spacing of listings allows."""
        self.waiting[key] = callback
        if self.timer is None:
            spacing = self.cost * (1.0 / SWEEP_SHARE - 1.0)
            delay = self.ended + spacing - time.monotonic()
            self.timer = self.loop.call_later(max(0.0, delay), self._run)

    def cancel(self, key: object) -> None:
        self.waiting.pop(key, None)

    def _run(self) -> None:
        self.timer = None
        waiting, self.waiting = self.waiting, {}
        for callback in waiting.values():
            guarded(callback)
