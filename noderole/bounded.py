"""Plugin code run in a worker thread, bounded in time: imports, hook calls and ``Call`` steps.

Python cannot interrupt a thread, so code that may hang (a hook blocked on a read, an import
making a network call, a plugin's step) runs in a daemon thread while its caller waits for it at
most its timeout. A call that has not returned by then is left to finish in the background, with
its thread, and the caller reports it; a daemon thread never keeps the process alive.

Starting a thread for each call costs about 80 us of wall time and 45 us of CPU, so each calling
thread keeps one worker and hands it call after call. Each hand-over still wakes the worker, then
the caller: where the other processor sleeps between hand-overs (an idle virtual CPU), a wake-up
costs 0.1-0.2 ms, and an apply made fifteen hand-overs. Two rules cut them, neither loosening a
bound:

- :func:`run_bounded_each` hands the worker a whole sequence (one hook's implementations, plugin
  after plugin). Each call is bounded from its own start, as if handed over alone; the worker goes
  from one to the next without waking the caller, who wakes at the end or at a bound. A late call
  is left to its thread and the calls after it go to a new worker.
- A call made from inside a bounded call runs right there, in the worker, when its bound would
  come no earlier than the outer call's (a hook calling other plugins' hooks with the same
  timeout): the outer bound covers it. A hang in it ends the outer call's bound, and the
  :class:`Late` the caller gets names the nested call the worker was running. A nested call with
  a shorter bound goes to the worker's own worker, so nesting never waits on itself.

A worker whose calling thread has ended, or which was left to a late call, ends once it is free.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from time import monotonic
from typing import Any, TextIO

__all__ = ["Entry", "Late", "Outcome", "run_bounded", "run_bounded_each"]

_IDLE = "noderole worker"
"""A worker thread's name between calls; during one it bears the call's name (for py-spy)."""

_NO_BOUND = float("inf")

_local = threading.local()
"""Per thread: ``worker``, the worker its calls go to; in a worker, ``running``, the names of the
calls it runs (the batch's, then any run inline inside it), and ``deadline``, when the caller of
the batch's call stops waiting for it (absent between calls)."""

Call = tuple[Callable[[], Any], str]
"""A function to call and the name its thread bears meanwhile."""


class Outcome:
    """What a call returned (``value``) or raised (``error``, any ``BaseException``)."""

    __slots__ = ("error", "value")

    def __init__(self) -> None:
        self.value: Any = None
        self.error: BaseException | None = None


class Late:
    """A call that had not returned within its bound; it goes on in the background.

    ``running`` names what its worker was running when the caller gave up, outermost first: the
    call itself, then any call it made that runs in the same worker (a hook collecting other
    plugins' hooks), so a report can name the innermost, where the time went.
    """

    __slots__ = ("running",)

    def __init__(self, running: tuple[str, ...]) -> None:
        self.running = running

    def __repr__(self) -> str:
        return f"Late(running={self.running!r})"


Entry = Outcome | Late
"""What :func:`run_bounded_each` gives for one call."""


def _outcome(function: Callable[[], Any]) -> Outcome:
    outcome = Outcome()
    _stdout_to_stderr()
    inside, _local.plugin = getattr(_local, "plugin", False), True
    try:
        outcome.value = function()
    except BaseException as error:  # the plugin's: handed to the caller, never raised here
        outcome.error = error
    finally:
        _local.plugin = inside
        # A plugin that set umask 000 (at import, in a hook or a step) would leave every
        # directory made for the rest of the run world-writable: group and other write are
        # taken away again after each call, as noderole._start.restrict_umask did before the
        # first (not imported from there: _start is the command's top, this a floor below).
        os.umask(os.umask(0o022) | 0o022)
    return outcome


class _PluginStdout:
    """``sys.stdout`` while plugin code runs: what a thread running plugin code writes goes to
    stderr, the rest to the stream it wraps. stdout is noderole's (``plan --json`` and ``apply
    --json`` print one document there); a plugin's ``print`` (at import, in a hook, in a step,
    in a call left running past its bound) must not go into it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.__wrapped__ = stream
        """The stream it wraps: noderole's own output (its progress lines) is written there,
        from whatever thread."""

    def write(self, text: str) -> int:
        if getattr(_local, "plugin", False):
            return sys.stderr.write(text)
        return self._stream.write(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _stdout_to_stderr() -> None:
    """Route this thread's writes to ``sys.stdout`` to stderr (see :class:`_PluginStdout`)."""
    if not isinstance(sys.stdout, _PluginStdout):
        sys.stdout = _PluginStdout(sys.stdout)


def _stops(stop: Callable[[Entry], bool] | None, outcome: Entry) -> bool:
    if stop is None:
        return False
    try:
        return stop(outcome)
    except Exception:  # a predicate tripping on a plugin's odd object: stop, the caller checks
        return True


class _Batch:
    """Calls handed to a worker at once, and how far it got. ``mutex`` guards ``since``,
    ``outcomes``, ``through`` and ``abandoned``: the caller gives up on a call, and the worker takes
    the next one or finishes, each only while holding it, so no call is both left and taken, and a
    finished batch is never taken for a late one."""

    __slots__ = (
        "abandoned",
        "calls",
        "done",
        "impatient",
        "late",
        "mutex",
        "outcomes",
        "patience",
        "running",
        "since",
        "stack",
        "stop",
        "through",
        "timeout",
    )

    def __init__(
        self,
        calls: Sequence[Call],
        timeout: float | None,
        stop: Callable[[Entry], bool] | None,
        patience: float | None = None,
        impatient: Callable[[], None] | None = None,
    ) -> None:
        self.calls = calls
        self.timeout = timeout
        self.stop = stop
        self.patience = patience
        self.impatient = impatient
        self.outcomes: list[Outcome] = []
        self.since = 0.0
        """When the time of the call now due began: the hand-over, then each call's start and
        end (a worker going from one call to the next spends no one's time)."""
        self.abandoned = False
        self.through = False
        self.late = 0
        """The call left running when the caller gave up (after :meth:`wait` returned False)."""
        self.stack: list[str] = []
        """The worker's ``running`` (set at the hand-over)."""
        self.running: tuple[str, ...] = ()
        """What the worker was running when the caller gave up."""
        self.mutex = _thread.allocate_lock()
        self.done = _thread.allocate_lock()
        self.done.acquire()

    def serve(self, current: threading.Thread) -> None:
        """Run the calls in the worker thread, until the last, a stop, or the caller leaves."""
        try:
            for function, name in self.calls:
                with self.mutex:
                    if self.abandoned:
                        return
                    start = self.since = monotonic()
                current.name = name
                self.stack.append(name)
                _local.deadline = _NO_BOUND if self.timeout is None else start + self.timeout
                try:
                    outcome = _outcome(function)
                finally:
                    del _local.deadline
                    del self.stack[-1]
                    current.name = _IDLE
                with self.mutex:
                    self.outcomes.append(outcome)
                    self.since = monotonic()
                if _stops(self.stop, outcome):
                    return
        finally:
            with self.mutex:
                self.through = True
            self.done.release()

    def wait(self) -> bool:
        """In the caller: True once the worker is through; False when the call it runs has had
        its time (the batch is then abandoned: the worker takes no further call). With
        ``patience``, ``impatient()`` is called once when the worker is not through by then."""
        if self.patience is not None and self.impatient is not None:
            patience = self.patience
            if self.timeout is not None:
                with self.mutex:
                    patience = min(patience, self.since + self.timeout - monotonic())
            if _acquire(self.done, max(0.0, patience)):
                return True
            with contextlib.suppress(Exception):  # the caller's hook; the wait goes on regardless
                self.impatient()
            if self.done.acquire(False):
                return True
        if self.timeout is None:
            _acquire(self.done, None)
            return True
        while True:
            with self.mutex:
                index = len(self.outcomes)
                left = self.since + self.timeout - monotonic()
            if _acquire(self.done, left) if left > 0 else self.done.acquire(False):
                return True
            with self.mutex:
                if self.through or len(self.outcomes) != index:
                    continue  # finished or moved on meanwhile: look again
                if self.since + self.timeout <= monotonic():
                    self.abandoned = True
                    self.late = index
                    self.running = tuple(self.stack) or (self.calls[index][1],)
                    return False

    def abandon(self) -> None:
        """Leave the worker (the caller is interrupted): it takes no further call."""
        with self.mutex:
            self.abandoned = True


LOOK = 0.2
"""Longest single wait of a caller for its worker. Python runs a signal's handler in the main
thread only, and a signal the kernel gives another thread wakes no wait of the main thread's:
one long wait held a Ctrl-C or SIGTERM until the call ended."""


def _acquire(lock: _thread.LockType, seconds: float | None) -> bool:
    """``lock.acquire(True, seconds)`` (None: no bound) in waits of at most :data:`LOOK`."""
    end = None if seconds is None else monotonic() + seconds
    while True:
        left = LOOK if end is None else min(LOOK, end - monotonic())
        if lock.acquire(True, max(0.0, left)):
            return True
        if end is not None and monotonic() >= end:
            return False


class _Worker:
    """One daemon thread running the calls of one calling thread, one batch at a time."""

    __slots__ = ("_running", "_slot", "_wake")

    def __init__(self) -> None:
        self._wake = _thread.allocate_lock()
        self._wake.acquire()
        # The batch handed over; None tells the thread to end.
        self._slot: list[_Batch | None] = [None]
        # What the thread runs, outermost first (its ``_local.running``).
        self._running: list[str] = []
        thread = threading.Thread(
            target=_serve, args=(self._slot, self._wake, self._running), name=_IDLE
        )
        thread.daemon = True
        thread.start()

    def run(self, batch: _Batch) -> bool:
        """Hand ``batch`` over and wait: see :meth:`_Batch.wait`."""
        self._slot[0] = batch
        batch.stack = self._running
        batch.since = monotonic()
        self._wake.release()
        return batch.wait()

    def __del__(self) -> None:
        # Dropped: its calling thread ended (a thread's locals go with it), or it was left to a
        # late call. The thread ends when it next looks at the slot.
        self._slot[0] = None
        with contextlib.suppress(RuntimeError):  # already woken for a batch it has not taken
            self._wake.release()


def _new_worker(name: str) -> _Worker:
    """A worker for this thread; NoderoleError naming the limit reached when no thread can be
    started (a call cannot be bounded without one, so it is not made)."""
    try:
        return _Worker()
    except RuntimeError as error:  # "can't start new thread": a full pids.max, threads-max
        from noderole.errors import NoderoleError
        from noderole.supervisor import _proclimit

        raise NoderoleError(
            f"cannot start a thread to run {name} in, bounded in time: {_proclimit.explain(error)}"
        ) from None


def _serve(slot: list[_Batch | None], wake: _thread.LockType, running: list[str]) -> None:
    current = threading.current_thread()
    _local.running = running
    while True:
        wake.acquire()
        batch = slot[0]
        if batch is None:
            return
        batch.serve(current)


def run_bounded(
    function: Callable[[], Any],
    *,
    name: str,
    timeout: float | None,
    patience: float | None = None,
    impatient: Callable[[], None] | None = None,
) -> Entry:
    """Run ``function()`` in the calling thread's worker and return what it returned or raised
    (an :class:`Outcome`), or :class:`Late` if it had not returned within ``timeout`` seconds
    (None: no bound).

    Whatever ``function`` raises, ``BaseException`` included (a plugin's ``SystemExit``), is in
    the outcome, never raised here. After :class:`Late` the call goes on in the background and
    the next call gets a new worker. ``name`` is the worker thread's name while the call runs.
    ``impatient()`` is called once, from the calling thread, if the call is still running after
    ``patience`` seconds (the caller may then hand other work to other threads); what it raises
    is ignored.
    """
    return run_bounded_each(
        [(function, name)], timeout=timeout, patience=patience, impatient=impatient
    )[0]


def run_bounded_each(
    calls: Sequence[Call],
    *,
    timeout: float | None,
    stop: Callable[[Entry], bool] | None = None,
    patience: float | None = None,
    impatient: Callable[[], None] | None = None,
) -> list[Entry]:
    """Run each ``(function, name)`` of ``calls`` in turn, as :func:`run_bounded` would one by
    one, handing them to the worker at once; return one entry per call run, in order: its
    :class:`Outcome`, or :class:`Late` for a call that had not returned within ``timeout`` seconds
    of its own start (the calls after it run in a new worker).

    With ``stop``, the calls after the first entry for which ``stop(entry)`` is true are not run
    (the list ends with that entry): a caller that gives up at the first failure calls no more
    plugins than it would have one by one.
    """
    deadline = getattr(_local, "deadline", None)
    if deadline is not None and (timeout is None or monotonic() + timeout >= deadline):
        return _run_here(calls, stop)
    entries: list[Entry] = []
    pending = calls
    while pending:
        worker: _Worker | None = getattr(_local, "worker", None)
        if worker is None:
            worker = _local.worker = _new_worker(pending[0][1])
        batch = _Batch(pending, timeout, stop, patience, impatient)
        patience = impatient = None  # once: a late call's successors are not waited for twice
        try:
            through = worker.run(batch)
        except BaseException:  # Ctrl-C while waiting: the call goes on; this worker is not reused
            batch.abandon()
            _local.worker = None
            raise
        # Once abandoned, the worker adds nothing the caller counts: the late call's own
        # outcome, if it ever comes, is past ``late``.
        late = len(batch.outcomes) if through else batch.late
        entries.extend(batch.outcomes[:late])
        if through:
            return entries
        # The worker is left to the late call; the calls after it go to a new worker.
        _local.worker = None
        late_entry = Late(batch.running)
        entries.append(late_entry)
        if _stops(stop, late_entry):
            return entries
        pending = pending[late + 1 :]
    return entries


def _run_here(calls: Sequence[Call], stop: Callable[[Entry], bool] | None) -> list[Entry]:
    """Nested calls the enclosing call's bound covers, run in this worker, named as they run."""
    current = threading.current_thread()
    outer = current.name
    running: list[str] = _local.running
    entries: list[Entry] = []
    try:
        for function, name in calls:
            current.name = name
            running.append(name)
            try:
                outcome = _outcome(function)
            finally:
                del running[-1]
            entries.append(outcome)
            if _stops(stop, outcome):
                break
    finally:
        current.name = outer
    return entries
