"""The supervisor's own log: one line per event, on its stderr (a file it was started with).

The daemon and its watchdog write here; the client points stderr at ``ROOT/var/log/noderole/
supervisor.log`` so the history survives a reboot. The file is rotated past :data:`MAX_BYTES`
(one old copy). Standard library only.
"""

from __future__ import annotations

import os
import time

__all__ = ["MAX_BYTES", "log", "set_role"]

MAX_BYTES = 1024 * 1024
"""The log is rotated (one old copy, ``.1``) past this size."""

_role = ["noderole-supervisor"]


def set_role(name: str) -> None:
    """Tag lines with ``name`` (``noderole-supervisor``, ``noderole-supervisor-watchdog``)."""
    _role[0] = name


def log(message: str) -> None:
    """Append one line; never raises (a full disk must not take the supervisor down)."""
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {_role[0]}[{os.getpid()}]: {message}\n"
    try:
        if os.fstat(2).st_size > MAX_BYTES:
            path = os.readlink("/proc/self/fd/2")
            if path.startswith("/") and os.path.isfile(path):
                os.replace(path, path + ".1")
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
        os.write(2, line.encode(errors="replace"))
    except OSError:
        pass
