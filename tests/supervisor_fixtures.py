"""Fixtures for the native supervisor's tests: a Supervisor in tmp_path that leaves nothing behind.

Every process a test starts through :func:`make_spec` carries a marker in its environment
(inherited by grandchildren); the daemon's command line names its run_dir. Teardown shuts the
daemon down, then SIGKILLs whatever still carries the marker or names the run_dir (and any pid a
test registered), and fails the test if shutdown had left anything running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from noderole.backends.native import supervision_spec
from noderole.records import Supervision
from noderole.supervisor import ProcessSpec, Supervisor
from noderole.supervisor._proc import is_alive
from noderole.supervisor._status import ServiceStatus
from noderole.testing import eventually, process_cmdline, process_environ
from noderole.testing._processes import WATCHDOG_MARK

__all__ = ["Harness", "close_harness", "harness", "wait_for"]

MARK = "NODEROLE_SUPERVISOR_TEST"
_WATCHDOG = WATCHDOG_MARK


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    """Poll ``condition`` until truthy (noderole.testing.eventually, under its old name here)."""
    return eventually(condition, what, timeout=timeout)


_environ = process_environ
_cmdline = process_cmdline


@attrs.define
class Harness:
    """A node root in tmp_path, a Supervisor on its run dir, and helpers to build specs."""

    root: Path
    supervisor: Supervisor
    extra_pids: list[int] = attrs.field(factory=list)

    @property
    def run_dir(self) -> Path:
        return self.supervisor.run_dir

    @property
    def mark(self) -> str:
        return str(self.root)

    def spec(
        self,
        name: str,
        script: str,
        *,
        supervision: Supervision | None = None,
        fingerprint: str = "f1",
        **kwargs: Any,
    ) -> ProcessSpec:
        """A /bin/sh service running ``script`` with the test marker in its environment."""
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", MARK: self.mark}
        env.update(kwargs.pop("environment", {}))
        supervision = supervision or Supervision(respawn_delay=0.05, stop_timeout=2)
        return ProcessSpec(
            name=name,
            argv=("/bin/sh", "-c", script),
            environment=env,
            supervision=supervision_spec(supervision),
            fingerprint=fingerprint,
            **kwargs,
        )

    def marked(self) -> list[int]:
        """Pids of running processes that carry this test's marker (children, grandchildren)."""
        needle = f"{MARK}={self.mark}\0".encode()
        return [
            int(p)
            for p in os.listdir("/proc")
            if p.isdigit() and needle in _environ(int(p)) + b"\0" and is_alive(int(p))
        ]

    def _naming_run_dir(self) -> list[int]:
        needle = str(self.run_dir).encode()
        return [
            int(p)
            for p in os.listdir("/proc")
            if p.isdigit()
            and int(p) != os.getpid()
            and needle in _cmdline(int(p))
            and is_alive(int(p))
        ]

    def settled_marked(self, expected: list[int]) -> list[int]:
        """marked(), once it equals ``expected`` (sorted) or after a bounded wait.

        A process in the middle of an exec briefly shows an empty /proc/PID/environ, so one look
        can miss it: look until the answer is the expected one, and return the last look.
        """
        want = sorted(expected)
        deadline = time.monotonic() + 5.0
        while True:
            seen = sorted(self.marked())
            if seen == want or time.monotonic() > deadline:
                return seen
            time.sleep(0.005)

    def kill_and_await_respawn(self, name: str, pid: int) -> ServiceStatus:
        """SIGKILL ``name``'s process ``pid``; its status once the daemon has respawned it."""
        os.kill(pid, signal.SIGKILL)
        status: ServiceStatus = wait_for(
            lambda: next(
                (s for s in self.supervisor.status([name]) if s.restarts == 1 and s.pid), None
            ),
            "a respawn",
        )
        return status

    def daemons(self) -> list[int]:
        """Pids of running supervisor daemons serving this run dir."""
        return [p for p in self._naming_run_dir() if _WATCHDOG not in _cmdline(p)]

    def watchdogs(self) -> list[int]:
        """Pids of running watchdogs of this run dir's daemons."""
        return [p for p in self._naming_run_dir() if _WATCHDOG in _cmdline(p)]

    def leftovers(self) -> list[int]:
        """Everything of this test still running."""
        return sorted({*self.marked(), *self._naming_run_dir(), *filter(is_alive, self.extra_pids)})


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    """A Harness; on teardown: shutdown, then SIGKILL and report anything that survived."""
    h = Harness(root=tmp_path, supervisor=Supervisor(tmp_path / "run" / "noderole", timeout=30))
    yield h
    close_harness(h)


def close_harness(h: Harness) -> None:
    """Shut ``h``'s daemon down, SIGKILL what survived, and fail the test if anything did."""
    problem = ""
    try:
        h.supervisor.shutdown()
    except Exception as e:  # still clean up, then report
        problem = f"shutdown failed: {e}"
    # A watchdog whose daemon was SIGKILLed by the test ends what is left, then exits itself.
    wait_for(lambda: h.daemons() or not h.watchdogs(), "the watchdog of a killed daemon to finish")
    survivors = h.leftovers()
    for pid in [*survivors, *h.extra_pids]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not h.leftovers(), "every process of the test to be gone")
    survivors = [p for p in survivors if p not in h.extra_pids]
    if survivors and not problem:
        problem = f"processes survived shutdown: {survivors}"
    if problem:
        pytest.fail(problem)
