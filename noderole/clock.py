"""Time, injectable: the real clock for boots, a fake one for tests.

Everything in noderole that waits or measures (bounded waits, respawn delays, step timings) takes a
:class:`Clock`. Tests pass :class:`FakeClock`, whose ``sleep`` advances time instantly, so a 120 s
timeout resolves in microseconds and deterministically.

All blocking goes through the clock: ``sleep`` for a plain pause, ``wait_readable`` for "until this
file descriptor has something to read, or the timeout" (how event-driven waits block on inotify).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "FakeClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """What noderole needs from time."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for timeouts and durations)."""

    def time(self) -> float:
        """Wall-clock seconds since the epoch (for certificates and reports)."""

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""

    def wait_readable(self, fd: int | None, timeout: float) -> bool:
        """Block until ``fd`` is readable or ``timeout`` seconds pass; True if it is readable.

        With ``fd=None`` this is a sleep of ``timeout`` that returns False.
        """


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait_readable(self, fd: int | None, timeout: float) -> bool:
        if fd is None:
            self.sleep(timeout)
            return False
        return _poll_readable(fd, max(0.0, timeout))


class FakeClock:
    """A clock that moves only when told to, or when someone sleeps on it.

    ``sleep(s)`` returns at once and advances the clock by ``s``. Thread-safe, so waits running in
    several threads share one timeline.
    """

    def __init__(self, start: float = 1_000.0, wall: float = 1_800_000_000.0) -> None:
        self._lock = threading.Lock()
        self._now = start
        self._wall_offset = wall - start

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def time(self) -> float:
        with self._lock:
            return self._now + self._wall_offset

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def wait_readable(self, fd: int | None, timeout: float) -> bool:
        """Look at ``fd`` without blocking; if nothing is there, advance by ``timeout``."""
        if fd is not None and _poll_readable(fd, 0.0):
            return True
        self.advance(max(0.0, timeout))
        return False

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``."""
        with self._lock:
            self._now += seconds


def _poll_readable(fd: int, timeout: float) -> bool:
    # poll(), not select(): select() fails on descriptors >= 1024, which a busy process can reach.
    import select  # here: a command that waits for no descriptor loads no extension for it

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    # Round up so a 0.4 ms remainder does not become a 0 ms busy loop.
    return bool(poller.poll(max(0, int(timeout * 1000 + 0.999))))
