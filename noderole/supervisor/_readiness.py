"""Readiness checks run from the daemon's event loop without ever blocking it.

The check itself is a probe of :mod:`noderole.supervisor.probes`, the same code the pre-start
waits use, so ``readable``, redirects and attempt timeouts mean the same in both. A path probe
is a ``stat``: it runs in the loop. Every other attempt (a connect, an HTTP request, a command)
runs in a short-lived thread, and the loop looks at its result on its next tick
(:data:`INTERVAL`); an attempt lasts at most ``probes.ATTEMPT_TIMEOUT`` and never past the
readiness deadline. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping

from noderole.supervisor import probes

__all__ = ["INTERVAL", "ReadinessCheck"]

INTERVAL = 0.025
"""Seconds between two looks."""


class ReadinessCheck:
    """Repeated attempts of one probe; :meth:`poll` is cheap and never blocks."""

    def __init__(self, probe: probes.Probe, environment: Mapping[str, str]) -> None:
        self.probe = probe
        self.environment = dict(environment)
        self.thread: threading.Thread | None = None
        self.result: probes.Outcome | None = None
        self.command: subprocess.Popen[bytes] | None = None
        self.closed = False
        self.last_missing: tuple[str, ...] = ()
        """What the last finished attempt found lacking (for the "not ready" reason)."""

    def poll(self, left: float) -> bool:
        """True once the probe holds; starts or collects one attempt (``left``: time to go)."""
        if isinstance(self.probe, probes.PathProbe):
            outcome = probes.attempt(self.probe, left=left)
            self.last_missing = outcome.missing
            return outcome.done
        if self.thread is None:
            self.result = None
            thread = threading.Thread(target=self._attempt, args=(left,), daemon=True)
            try:
                thread.start()
            except RuntimeError as e:  # no thread to be had (a full pids.max): next tick again
                from noderole.supervisor import _proclimit

                self.last_missing = (f"no thread for the check: {_proclimit.explain(e)}",)
                return False
            self.thread = thread
            return False
        if self.thread.is_alive():
            return False
        self.thread = None
        result = self.result
        if result is None:
            return False
        self.last_missing = result.missing
        return result.done

    def _attempt(self, left: float) -> None:
        try:
            self.result = probes.attempt(
                self.probe, left=left, environment=self.environment, started=self._started
            )
        except Exception as e:  # a bug in an attempt is "not ready", never a dead thread
            self.result = probes.Outcome(done=False, missing=(f"{type(e).__name__}: {e}",))
        finally:
            self.command = None

    def _started(self, proc: subprocess.Popen[bytes]) -> None:
        self.command = proc
        if self.closed:
            probes.kill_group(proc)

    def close(self) -> None:
        """Give up: a command still running is killed with its process group."""
        self.closed = True
        proc = self.command
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
