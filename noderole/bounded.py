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
from typing import Any

__all__ = ["Outcome", "run_bounded"]

_IDLE = "noderole worker"
"""A worker thread's name between calls; during one it bears the call's name (for py-spy)."""

_local = threading.local()


class Outcome:
    """What a call returned (``value``) or raised (``error``, any ``BaseException``)."""

    __slots__ = ("error", "value")

    def __init__(self) -> None:
        self.value: Any = None
        self.error: BaseException | None = None


_Call = tuple[Callable[[], Any], str, Outcome, _thread.LockType]


class _Worker:
    """One daemon thread running the calls of one calling thread, one at a time."""

    __slots__ = ("_slot", "_wake")

    def __init__(self) -> None:
        self._wake = _thread.allocate_lock()
        self._wake.acquire()
        # The call handed over; None tells the thread to end.
        self._slot: list[_Call | None] = [None]
        thread = threading.Thread(target=_serve, args=(self._slot, self._wake), name=_IDLE)
        thread.daemon = True
        thread.start()

    def run(self, function: Callable[[], Any], name: str, timeout: float | None) -> Outcome | None:
        outcome = Outcome()
        done = _thread.allocate_lock()
        done.acquire()
        self._slot[0] = (function, name, outcome, done)
        self._wake.release()
        return outcome if done.acquire(True, -1 if timeout is None else timeout) else None

    def __del__(self) -> None:
        # Dropped: its calling thread ended (a thread's locals go with it), or it was left to a
        # late call. The thread ends when it next looks at the slot.
        self._slot[0] = None
        with contextlib.suppress(RuntimeError):  # already woken for a call it has not taken
            self._wake.release()


def _serve(slot: list[_Call | None], wake: _thread.LockType) -> None:
    current = threading.current_thread()
    while True:
        wake.acquire()
        call = slot[0]
        if call is None:
            return
        function, name, outcome, done = call
        current.name = name
        try:
            outcome.value = function()
        except BaseException as error:  # the plugin's: handed to the caller, never raised here
            outcome.error = error
        finally:
            current.name = _IDLE
            done.release()


def run_bounded(function: Callable[[], Any], *, name: str, timeout: float | None) -> Outcome | None:
    """Run ``function()`` in the calling thread's worker and return what it returned or raised
    (an :class:`Outcome`), or None if it had not returned within ``timeout`` seconds (None: no
    bound).

    Whatever ``function`` raises, ``BaseException`` included (a plugin's ``SystemExit``), is in
    the outcome, never raised here. After None the call goes on in the background and the next
    call gets a new worker. ``name`` is the worker thread's name while the call runs.
    """
    worker: _Worker | None = getattr(_local, "worker", None)
    if worker is None:
        worker = _local.worker = _Worker()
    try:
        outcome = worker.run(function, name, timeout)
    except BaseException:  # Ctrl-C while waiting: the call goes on; this worker is not reused
        _local.worker = None
        raise
    if outcome is None:
        _local.worker = None
    return outcome
