"""A service's pidfile: the *child's* pid, written on every (re)spawn, removed on stop.

Unlike OpenRC's supervise-daemon, which stores its own pid there (openrc#163). A pidfile left by
someone else is noted, never trusted: nothing is killed because a file names it (what a start
makes of a pidfile it finds: ``Daemon.judge_pidfile``). Its directory may belong to the
service's user: it is written through :func:`._safeopen.replace_file` (a random ``O_EXCL``
temporary renamed over it) and read with ``O_NOFOLLOW|O_NONBLOCK``, so a planted link or FIFO is
never followed nor waited on. Standard library only.

A pidfile that cannot be written (``/run`` full) is said once per service, not at every respawn
(a crash loop would otherwise flood the log and rotate its history away): again only when the
error changes, and ``NAME: pidfile PATH written again`` once it can be written. These lines are
rate-limited too (:func:`._log.log_limited`), so a write failing and working by turns cannot
flood the log either.
"""

from __future__ import annotations

import errno
import os
import stat

from noderole.supervisor import _safeopen
from noderole.supervisor._log import log, log_limited

__all__ = ["remove", "write"]


_failing: dict[str, int | None] = {}
"""Service name -> errno of the failure last said, while its pidfile cannot be written."""
_services: dict[str, str] = {}
"""Pidfile path -> the service whose pid was written there (for :func:`remove`'s lines)."""


def write(name: str, path: str | None, pid: int) -> None:
    """Write ``pid`` atomically (temp file + rename); a failure is logged (once), not raised."""
    if not path:
        return
    _services[path] = name
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


def remove(path: str | None, pid: int | None, name: str | None = None) -> None:
    """Remove the pidfile once the service is stopped (or given up), whatever pid it names.

    It names ``pid``, the service's process the supervisor wrote there; or another pid, if the
    service wrote one (some programs write their own pidfile at the same path): that one is
    removed too, and said. Left behind, such a file names a process that is no service's, and a
    ``kill $(cat PIDFILE)``, a monitor, or the next start (:meth:`Daemon.judge_pidfile`) would
    take it for the service; systemd removes a ``PIDFile=`` after the stop whatever it holds.

    Only a pidfile is removed: a regular file whose first word is a pid, as a start reads it.
    Anything else at its name (a link, a FIFO, a file that holds no pid) was put there by
    someone else, names no process, and is replaced at the next start: it is left, and said.
    ``pid`` None (recorded before a reboot): the pidfile is removed without a word. ``name``:
    the service's, for those lines (by default, the one whose pid was written there).
    """
    if not path:
        return
    service = name or _services.get(path)
    said = f"{service}: pidfile {path}" if service else f"pidfile {path}"
    parent, base = os.path.split(path)
    try:
        # One directory descriptor for the check and the removal: the user who owns the
        # directory may swap it for a link in between, and the removal must not follow it.
        directory = _safeopen.open_dir(parent or "/")
    except OSError:
        return
    try:
        try:
            fd = os.open(
                base, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory
            )
        except OSError as e:
            if e.errno == errno.ELOOP:
                log(f"{said} is a symbolic link: left it (a pidfile is a regular file)")
            return
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
            words = os.read(fd, 64).split()[:1] if regular else []
        finally:
            os.close(fd)
        if not regular:
            log(f"{said} is not a regular file: left it")
            return
        named = int(words[0]) if words and words[0].isdigit() else None
        if named is None:
            log(f"{said} holds no pid: left it")
            return
        # Unlinked by name in the directory looked at: a link's target is never touched (a
        # hard link loses one name, its file stays whole under the others).
        os.unlink(base, dir_fd=directory)
        if pid is not None and named != pid:
            log(f"{said} named pid {named}, not the service's pid {pid}: removed it")
    except OSError:
        pass
    finally:
        os.close(directory)
