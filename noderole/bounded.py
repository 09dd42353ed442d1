"""Plugin code run in a worker thread, bounded in time: imports, hook calls and ``Call`` steps.

Python cannot interrupt a thread, so code that may hang (a hook blocked on a read, an import
making a network call, a plugin's step) runs in a daemon thread while its caller waits for it at
most its timeout. A call that has not returned by then is left to finish in the background, with
its thread, and the caller reports it; a daemon thread never keeps the process alive.

Starting a thread for each call costs about 80 us of wall time and 45 us of CPU, and an apply of
the server role makes some twenty calls. Each calling thread instead keeps one worker and hands it
call after call (about 9 us each). A call made from a worker (a hook calling other plugins' hooks)
goes to that worker's own worker, so nesting never waits on itself. A worker whose calling thread
has ended, or which was left to a late call, ends once it is free.
"""

from __future__ import annotations

import _thread
import contextlib
import threading
from collections.abc import Callable

__all__ = ["run_bounded"]

_IDLE = "noderole worker"
"""A worker thread's name between calls; during one it bears the call's name (for py-spy)."""

_local = threading.local()


class _Worker:
    """One daemon thread running the calls of one calling thread, one at a time."""

    __slots__ = ("_slot", "_wake")

    def __init__(self) -> None:
        self._wake = _thread.allocate_lock()
        self._wake.acquire()
        # The call handed over: (function, name, done); None tells the thread to end.
        self._slot: list[tuple[Callable[[], object], str, _thread.LockType] | None] = [None]
        thread = threading.Thread(target=_serve, args=(self._slot, self._wake), name=_IDLE)
        thread.daemon = True
        thread.start()

    def run(self, function: Callable[[], object], name: str, timeout: float | None) -> bool:
        done = _thread.allocate_lock()
        done.acquire()
        self._slot[0] = (function, name, done)
        self._wake.release()
        return done.acquire(True, -1 if timeout is None else timeout)

    def __del__(self) -> None:
        # Dropped: its calling thread ended (a thread's locals go with it), or it was left to a
        # late call. The thread ends when it next looks at the slot.
        self._slot[0] = None
        with contextlib.suppress(RuntimeError):  # already woken for a call it has not taken
            self._wake.release()


def _serve(
    slot: list[tuple[Callable[[], object], str, _thread.LockType] | None],
    wake: _thread.LockType,
) -> None:
    current = threading.current_thread()
    while True:
        wake.acquire()
        call = slot[0]
        if call is None:
            return
        function, name, done = call
        current.name = name
        try:
            function()
        except BaseException:  # the callers' functions catch their own errors; anything that
            pass  # escapes them must not end the worker and so hang the next call
        finally:
            current.name = _IDLE
            done.release()


def run_bounded(function: Callable[[], object], *, name: str, timeout: float | None) -> bool:
    """Run ``function()`` in the calling thread's worker; True once it returned, False if it had
    not within ``timeout`` seconds (None: no bound).

    ``function`` keeps its own result and catches its own exceptions (what it raises is dropped):
    the caller reads them from where ``function`` put them, once this returned True. After False
    the call goes on in the background and the next call gets a new worker. ``name`` is the
    worker thread's name while the call runs.
    """
    worker: _Worker | None = getattr(_local, "worker", None)
    if worker is None:
        worker = _local.worker = _Worker()
    try:
        if worker.run(function, name, timeout):
            return True
    except BaseException:  # Ctrl-C while waiting: the call goes on; this worker is not reused
        _local.worker = None
        raise
    _local.worker = None
    return False
