"""The daemon's event loop: ``selectors`` (epoll) for file descriptors, a heap for timers.

Single-threaded on purpose: a stop that arrives while a respawn is pending simply cancels the
timer; there is no second thread to race it (openrc#375, openrc#400). A callback that raises is
logged with its traceback and the loop carries on: a bug in one service's handling must not end
the daemon (and, through the watchdog, every service). Standard library only.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import selectors
import time
from collections.abc import Callable

from noderole.supervisor._log import log_error

__all__ = ["Loop", "Timer"]


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
        self.woke_ns = 0
        """When the last wait for events returned (``time.monotonic_ns``): every event handled
        in this turn, a child's exit above all, happened before it."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(time.monotonic() + max(0.0, delay), callback)
        heapq.heappush(self.timers, (timer.when, next(self.counter), timer))
        return timer

    def add_reader(self, fd: int, callback: Callable[[], None]) -> None:
        self.selector.register(fd, selectors.EVENT_READ, callback)

    def add_writer(self, fd: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever ``fd`` can be written to (until :meth:`remove_reader`)."""
        self.selector.register(fd, selectors.EVENT_WRITE, callback)

    def remove_reader(self, fd: int) -> None:
        """Stop watching ``fd`` (for reading or writing); nothing if it was not watched."""
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(fd)

    def busy(self) -> bool:
        """Something is ready to run now: a file descriptor has an event or a timer is due."""
        while self.timers and self.timers[0][2].cancelled:
            heapq.heappop(self.timers)
        if self.timers and self.timers[0][0] <= time.monotonic():
            return True
        return bool(self.selector.select(0))

    def run_once(self, max_wait: float) -> None:
        """Wait for one batch of events (or the next timer), then run their callbacks."""
        now = time.monotonic()
        while self.timers and self.timers[0][2].cancelled:
            heapq.heappop(self.timers)
        wait = max_wait
        if self.timers:
            wait = min(wait, max(0.0, self.timers[0][0] - now))
        events = self.selector.select(wait)
        self.woke_ns = time.monotonic_ns()
        for key, _ in events:
            guarded(key.data)
        now = time.monotonic()
        while self.timers and self.timers[0][0] <= now:
            _, _, timer = heapq.heappop(self.timers)
            if not timer.cancelled:
                timer.cancelled = True
                guarded(timer.callback)


def guarded(callback: Callable[[], None]) -> None:
    """Run a callback; an exception is logged with its traceback, never raised."""
    try:
        callback()
    except Exception:
        import traceback

        log_error("internal error, carrying on:\n" + traceback.format_exc())
