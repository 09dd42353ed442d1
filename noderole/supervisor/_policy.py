"""When to respawn a process that exited, and when to give up: pure arithmetic on times.

Semantics (supervise-daemon's, with openrc#247 fixed):

* ``respawn_max`` respawns are allowed within ``respawn_period`` seconds; 0 means unlimited.
  The window opens at the first exit and does not slide: an exit more than ``respawn_period``
  after the window opened starts a new window. ``respawn_period=None``: one window for the whole
  life of the service in this supervisor.
* The exit that would need respawn number ``respawn_max + 1`` gives up: exactly ``respawn_max``
  respawns happen (OpenRC 0.45 gives up one earlier).
* With ``backoff_max`` set, the delay doubles per consecutive exit: ``delay, 2*delay, 4*delay...``
  capped at ``backoff_max``. A run that lasted :func:`healthy_after` seconds resets the doubling.

No clock, no processes: the daemon passes times in, tests pass numbers.
"""

from __future__ import annotations

__all__ = ["RespawnPolicy", "healthy_after"]


def healthy_after(respawn_delay: float) -> float:
    """Seconds a process must run for its next exit to count as a fresh failure, not a loop.

    10 x the respawn delay, at least 1 s and at most 60 s.
    """
    return min(60.0, max(1.0, 10.0 * respawn_delay))


class RespawnPolicy:
    """Counts exits of one service and answers "respawn after how long, or give up?"."""

    def __init__(
        self,
        *,
        respawn_delay: float,
        respawn_max: int,
        respawn_period: float | None,
        backoff_max: float | None,
    ) -> None:
        self.respawn_delay = respawn_delay
        self.respawn_max = respawn_max
        self.respawn_period = respawn_period
        self.backoff_max = backoff_max
        self.window_start: float | None = None
        """When the current window's first exit happened."""
        self.in_window = 0
        """Respawns done in the current window."""
        self.consecutive = 0
        """Exits since the last healthy run (drives the backoff)."""

    def on_exit(self, now: float, ran_for: float) -> float | None:
        """The process exited at ``now`` after ``ran_for`` seconds: delay before respawn, or None.

        None means give up (the limit of respawns in the window is reached).
        """
        if (
            self.window_start is not None
            and self.respawn_period is not None
            and now - self.window_start > self.respawn_period
        ):
            self.window_start = None
        if self.window_start is None:
            self.window_start = now
            self.in_window = 0
        if ran_for >= healthy_after(self.respawn_delay):
            self.consecutive = 0
        if self.respawn_max and self.in_window >= self.respawn_max:
            return None
        self.in_window += 1
        self.consecutive += 1
        return self.delay()

    def delay(self) -> float:
        """The wait before the next respawn, given the consecutive exits so far."""
        if self.backoff_max is None or self.consecutive <= 1:
            return self.respawn_delay
        doubled = self.respawn_delay * 2.0 ** min(self.consecutive - 1, 62)
        return max(self.respawn_delay, min(self.backoff_max, doubled))
