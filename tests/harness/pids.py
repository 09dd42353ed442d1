"""A cgroup of the pids controller, made for one test and removed after: ``pids.max`` at work.

A container's ``pids.max`` (or a systemd unit's ``TasksMax=``) is the limit a node at boot most
often meets: past it ``fork`` fails with ``EAGAIN`` and ``Thread.start`` with "can't start new
thread". A :class:`PidsCgroup` is made under the pids hierarchy this machine has (cgroup v1's
``/sys/fs/cgroup/pids``, or a cgroup2 mount whose root offers the ``pids`` controller), with a
random name; :meth:`run` starts a command inside it; :meth:`close` SIGKILLs whatever is still in
it, by pid, and removes it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["PidsCgroup", "pids_problem"]

_V1 = Path("/sys/fs/cgroup/pids")
_V2_CANDIDATES = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))

# The child moves itself into the cgroup, then becomes the command: nothing it starts is outside.
_ENTER = (
    "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
    "os.execvp(sys.argv[2], sys.argv[2:])"
)


def _base() -> Path | None:
    if (_V1 / "cgroup.procs").exists() and os.access(_V1, os.W_OK):
        return _V1
    for root in _V2_CANDIDATES:
        with contextlib.suppress(OSError):
            offered = (root / "cgroup.subtree_control").read_text().split()
            if "pids" in offered and os.access(root, os.W_OK):
                return root
    return None


def pids_problem() -> str | None:
    """Why no pids cgroup can be made here (None when one can)."""
    if os.geteuid() != 0:
        return "making a cgroup needs root"
    if _base() is None:
        return "no writable pids cgroup hierarchy (cgroup v1 pids, or cgroup2 offering pids)"
    return None


class PidsCgroup:
    """A fresh cgroup whose ``pids.max`` is ``limit``."""

    def __init__(self, limit: int | str) -> None:
        base = _base()
        if base is None:
            raise RuntimeError(pids_problem() or "no pids cgroup hierarchy")
        self.path = base / f"noderole-test-{uuid.uuid4().hex[:12]}"
        self.path.mkdir()
        self.name = "/" + self.path.name
        """Its path as /proc/PID/cgroup names it (made right under the hierarchy's root)."""
        self.set_limit(limit)

    def __enter__(self) -> PidsCgroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_limit(self, limit: int | str) -> None:
        (self.path / "pids.max").write_text(f"{limit}\n")

    def current(self) -> int:
        """Its tasks (threads included) now: ``pids.current``."""
        return int((self.path / "pids.current").read_text())

    def pids(self) -> list[int]:
        with contextlib.suppress(FileNotFoundError):
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        return []

    def add(self, pid: int) -> None:
        """Move process ``pid`` (not its threads' own later children: they are born inside)."""
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the cgroup to its end (``subprocess.run``'s keywords)."""
        entered = [sys.executable, "-c", _ENTER, str(self.path / "cgroup.procs"), *argv]
        return subprocess.run(entered, capture_output=True, text=True, check=False, **kwargs)

    def close(self, timeout: float = 20) -> None:
        """SIGKILL every process left in it, then remove it."""
        deadline = time.monotonic() + timeout
        self.set_limit("max")
        while True:
            left = self.pids()
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not left:
                try:
                    self.path.rmdir()
                    return
                except FileNotFoundError:
                    return
                except OSError:  # EBUSY: a killed process not yet reaped by its parent
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.path} still holds {left} after {timeout:g}s")
            time.sleep(0.02)
