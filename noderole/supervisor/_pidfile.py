"""A service's pidfile: the *child's* pid, written on every (re)spawn, removed on stop.

Unlike OpenRC's supervise-daemon, which stores its own pid there (openrc#163). A pidfile left by
someone else is noted, never trusted: nothing is killed because a file names it. Its directory
may belong to the service's user: it is written through :func:`._safeopen.replace_file` (a random
``O_EXCL`` temporary renamed over it) and read with ``O_NOFOLLOW|O_NONBLOCK``, so a planted link
or FIFO is never followed nor waited on. Standard library only.

A pidfile that cannot be written (``/run`` full) is said once per service, not at every respawn
(a crash loop would otherwise flood the log and rotate its history away): again only when the
error changes, and ``NAME: pidfile PATH written again`` once it can be written. These lines are
rate-limited too (:func:`._log.log_limited`), so a write failing and working by turns cannot
flood the log either.
"""

from __future__ import annotations

import os
import stat

from noderole.supervisor import _proc, _safeopen
from noderole.supervisor._log import log, log_limited

__all__ = ["note_stale", "remove", "write"]


def note_stale(name: str, path: str | None) -> None:
    """Log a pidfile found before the first start (it is replaced)."""
    if not path:
        return
    try:
        pid = int(_safeopen.read_small(path, 64).split()[0])
    except (OSError, ValueError, IndexError):
        return
    what = "a running process that is not ours" if _proc.is_alive(pid) else "no process"
    log(f"{name}: stale pidfile {path} names {pid}, {what}: replacing it")


_failing: dict[str, int | None] = {}
"""Service name -> errno of the failure last said, while its pidfile cannot be written."""


def write(name: str, path: str | None, pid: int) -> None:
    """Write ``pid`` atomically (temp file + rename); a failure is logged (once), not raised."""
    if not path:
        return
    try:
        _safeopen.replace_file(path, f"{pid}\n".encode(), mode=0o644)
    except OSError as e:
        if _failing.get(name, 0) != e.errno:
            _failing[name] = e.errno
            log_limited(
                f"{name} pidfile",
                f"{name}: cannot write pidfile {path}: {e}; not said again until it is written "
                "or fails otherwise",
            )
        return
    if _failing.pop(name, 0) != 0:
        log_limited(f"{name} pidfile", f"{name}: pidfile {path} written again")


def remove(path: str | None, pid: int | None) -> None:
    """Remove the pidfile if it still names ``pid`` (someone else may have rewritten it)."""
    if not path:
        return
    parent, name = os.path.split(path)
    try:
        # One directory descriptor for the check and the removal: the user who owns the
        # directory may swap it for a link in between, and the removal must not follow it.
        directory = _safeopen.open_dir(parent or "/")
    except OSError:
        return
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory
        )
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            content = os.read(fd, 64).decode(errors="replace").strip()
        finally:
            os.close(fd)
        if pid is None or content == str(pid):
            os.unlink(name, dir_fd=directory)
    except OSError:
        pass
    finally:
        os.close(directory)
