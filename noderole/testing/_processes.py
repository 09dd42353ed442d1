"""Finding and ending every process a test started under a node root.

Everything noderole starts under ``--root DIR`` is recognisable: each service's process (and its
children, which inherit the environment) carries ``NODEROLE_ROOT=DIR``, and the native
supervisor's command line names ``DIR/run/noderole``. An end-to-end test calls
:func:`end_node_processes` in its teardown, so a failing test still leaves nothing running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from noderole.testing._root import RootLike, as_node_root

__all__ = [
    "WATCHDOG_MARK",
    "end_node_processes",
    "eventually",
    "node_processes",
    "process_cmdline",
    "process_environ",
    "process_parent",
    "supervisor_processes",
]

T = TypeVar("T")

WATCHDOG_MARK = b"noderole-supervisor-watchdog"
"""The first word of the supervisor watchdog's command line (its process title)."""


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def process_environ(pid: int) -> bytes:
    """``/proc/PID/environ`` (NUL-separated), or b"" when the process is gone or unreadable."""
    return _read(f"/proc/{pid}/environ")


def process_cmdline(pid: int) -> bytes:
    """``/proc/PID/cmdline`` (NUL-separated), or b"" when the process is gone or unreadable."""
    return _read(f"/proc/{pid}/cmdline")


def process_parent(pid: int) -> int | None:
    """The parent pid of ``pid``, or None when it is gone."""
    stat = _read(f"/proc/{pid}/stat")
    try:
        return int(stat.rsplit(b")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def eventually(condition: Callable[[], T], what: str, *, timeout: float = 20.0) -> T:
    """Poll ``condition`` until it returns something truthy, and return that.

    Fails the test naming ``what`` after ``timeout`` seconds: a generous bound for a slow CI
    machine, never an assertion about how long something took.
    """
    import pytest

    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


def _is_zombie(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return True  # gone
    return stat.rsplit(b")", 1)[-1].split()[:1] in ([b"Z"], [b"X"])


def node_processes(root: RootLike) -> list[int]:
    """Live pids (zombies excluded) started for ``root``: services, their children, the daemon."""
    base = as_node_root(root).path
    marker = f"NODEROLE_ROOT={base}\0".encode()
    run_dir = str(base / "run" / "noderole").encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        environ = process_environ(pid) + b"\0"
        if (marker in environ or run_dir in process_cmdline(pid)) and not _is_zombie(pid):
            found.append(pid)
    return sorted(found)


def supervisor_processes(root: RootLike) -> tuple[list[int], list[int]]:
    """(daemons, watchdogs) of ``root``'s native supervisor: normally one of each."""
    run_dir = str(as_node_root(root).path / "run" / "noderole").encode()
    daemons: list[int] = []
    watchdogs: list[int] = []
    for pid in node_processes(root):
        cmdline = process_cmdline(pid)
        if run_dir in cmdline:
            (watchdogs if WATCHDOG_MARK in cmdline else daemons).append(pid)
    return daemons, watchdogs


def end_node_processes(root: RootLike, *, timeout: float = 20.0) -> list[int]:
    """Shut the supervisor of ``root`` down, then SIGKILL whatever is left; wait until all are gone.

    Returns the pids that were still running after the supervisor's orderly shutdown — a test
    should expect none (a survivor is a bug: an orphan the next boot would trip on).
    """
    from noderole.supervisor import Supervisor

    base = as_node_root(root).path
    with contextlib.suppress(Exception):  # a broken daemon must not stop the clean-up
        Supervisor(Path(base) / "run" / "noderole", timeout=timeout).shutdown()
    survivors = node_processes(base)
    for pid in survivors:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while node_processes(base) and time.monotonic() < deadline:
        time.sleep(0.01)
    return survivors
