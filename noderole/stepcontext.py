"""What a step runs with: :class:`StepContext` (the node, the clock, progress, what was written)
and :class:`Cancel`, the token ``apply`` cancels when a service a step waits on failed.

Below the records (a :class:`noderole.Call` record names the type of its function's argument)
and above nothing but the clock, the root and the errors, so the records, the waits and the
steps all use it without importing one another in a circle.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from noderole import recordclass
from noderole.clock import Clock, SystemClock
from noderole.errors import WaitCancelled
from noderole.root import NodeRoot

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["Cancel", "StepContext"]


class Cancel:
    """A cancellation token: cancelled once, from any thread, with the reason.

    ``apply`` gives one to each service's waits and cancels it when a service it is ordered
    after fails, so a wait for a file that service would have written ends at once.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""
        """Why the waits were cancelled (the root cause, ``k3s failed: ...``)."""

    def cancel(self, reason: str) -> None:
        """Cancel (the first reason given is kept)."""
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._event.is_set()

    def check(self) -> None:
        """Raise :class:`WaitCancelled` (its text: the reason) when cancelled."""
        if self._event.is_set():
            raise WaitCancelled(self.reason)


@recordclass.define(kw_only=True)
class StepContext:
    """What a step (and a plugin's :class:`noderole.Call` function) gets to work with."""

    service: str
    """Name of the service whose steps run."""
    root: NodeRoot
    """The node root; use :meth:`resolve` for every node path."""
    clock: Clock = recordclass.field(factory=SystemClock)
    """The clock: never call ``time.sleep`` in a step, call ``ctx.clock.sleep``."""
    progress: Callable[[str], None] = recordclass.field(default=lambda text: None)
    """Report what the step is waiting for (shown by ``apply``'s console output)."""
    written: list[str] = recordclass.field(factory=list)
    """Node paths the steps wrote so far (for reports and the plugin-author kit). A
    :class:`noderole.Call` function that writes a file appends its node path here, so
    ``noderole reset`` removes it."""
    cancel: Cancel | None = None
    """Set by ``apply`` when a service this one is ordered after failed: waits end at once."""
    progress_every: float = 0.0
    """Seconds between "still waiting" progress lines of a long wait (0: only the first)."""
    blocking: Callable[[], None] = recordclass.field(default=lambda: None, repr=False)
    """Called before the step may wait long for something other than a condition it reports
    through :attr:`progress` (a :class:`noderole.Call` still running after a moment): ``apply``
    lets the services ready meanwhile go on in another thread."""

    def resolve(self, node_path: str) -> Path:
        """Where a node path lives on this machine."""
        return self.root.resolve(node_path)

    def poll(
        self,
        check: Callable[[], bool],
        *,
        timeout: float,
        what: str,
        interval: float = 0.1,
    ) -> float:
        """Call ``check`` until it returns True; raise :class:`WaitTimeout` after ``timeout``.

        For conditions no inotify event announces (an interface getting an address). Returns the
        seconds waited.
        """
        from noderole.errors import WaitTimeout

        start = self.clock.monotonic()
        announced = False
        next_report = 0.0
        while True:
            if check():
                return self.clock.monotonic() - start
            if self.cancel is not None:
                self.cancel.check()
            waited = self.clock.monotonic() - start
            if waited >= timeout:
                raise WaitTimeout(f"{what} not true after {round(waited)}s")
            if not announced:
                self.progress(f"waiting for {what}")
                announced = True
                next_report = self.progress_every
            elif self.progress_every > 0 and waited >= next_report:
                self.progress(f"still waiting for {what} ({waited:.0f}s of {timeout:g}s)")
                next_report += self.progress_every
            self.clock.sleep(min(interval, timeout - waited))
