"""The daemon's limit of open files: raised for itself, the one it was given for every child.

A supervisor holds descriptors for as long as its services run: a pidfd for each process, the
read end of a pipe for each logged stream, and each log file. Most systems start programs with a
soft limit of 1,024 (the kernel's default for init, systemd's for every service); at three
descriptors a logged service that is some 340 services, and past it every start, every write of
the state file and every control connection failed with EMFILE: the daemon could neither start
nor be asked anything more.

So the daemon raises its soft limit to its hard limit as it starts (:func:`raise_limit`, as
systemd does for itself), and gives each service the limit the daemon was started with, as
OpenRC and systemd give theirs: a program using ``select()`` must not meet a descriptor above
1,023, and one that closes every descriptor up to its limit as it starts must not walk a
million. That limit is set before the child runs, never after (Go's runtime raises its own soft
limit as it starts; lowering it afterwards could undo that): :func:`for_child` lowers the
daemon's soft limit around the spawn, since a child takes its limits from its parent's at the
fork.

While it is lowered, the daemon's other threads (readiness checks, name lookups) may open
descriptors too, and a new descriptor takes the lowest free number. So every descriptor the
daemon keeps (:func:`keep`) is moved to :data:`LOW` or above, and the numbers below stay free for
short-lived ones. When the numbers above are used up (the hard limit), a start fails with
:class:`Exhausted`, which names the limit to raise, and the low numbers are still there for the
daemon's own state writes and control connections.

Standard library only (the daemon imports it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import resource
from collections.abc import Iterator

__all__ = ["LOW", "Exhausted", "for_child", "keep", "raise_limit", "why_not_raised"]

LOW = 256
"""Descriptors the daemon keeps get this number or a higher one (less when the limit is low)."""

_given: tuple[int, int] | None = None
"""The limit the daemon was started with, once :func:`raise_limit` has raised it."""


class Exhausted(OSError):
    """No descriptor number is left for the daemon to keep: the hard limit is reached."""

    def __str__(self) -> str:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        return (
            f"too many open files: the supervisor's hard limit of open files (RLIMIT_NOFILE) "
            f"is {hard}, too few for another service (it keeps up to 3 for each, and some for "
            "itself): raise it for noderole (ulimit -Hn in the script that runs noderole "
            "apply, LimitNOFILE= in its unit)"
        )


def raise_limit() -> None:
    """Raise the daemon's soft limit of open files to its hard limit; remember the one given.

    A limit that cannot be raised (a hard limit equal to the soft one) is left as it is: the
    daemon then runs as many services as it fits and says which limit to raise for the rest.
    """
    global _given
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard or soft == resource.RLIM_INFINITY:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError):  # a hard limit above the kernel's nr_open: keep the soft one
        return
    _given = (soft, hard)


def low() -> int:
    """The lowest number a kept descriptor gets: :data:`LOW`, or half a soft limit under 512,
    so that the numbers below stay free for the daemon's own and short-lived descriptors."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return min(LOW, max(3, soft // 2))


def keep(fd: int) -> int:
    """Move ``fd``, a descriptor the daemon keeps, to a number at :func:`low` or above; return
    the new number (close-on-exec). Raises :class:`Exhausted` (``fd`` closed) when none is free.
    """
    try:
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low())
    except OSError as e:
        if e.errno not in (errno.EMFILE, errno.EINVAL):
            raise
        raise Exhausted(errno.EMFILE, os.strerror(errno.EMFILE)) from None
    finally:
        os.close(fd)
    return moved


@contextlib.contextmanager
def for_child(wanted: int | None = None) -> Iterator[tuple[int, int] | None]:
    """Within: the daemon's limit is the one for a child forked meanwhile: the one it was given,
    or ``wanted`` (a service's ``open_files``). Yields the limit set (None: the daemon's own).

    ``wanted`` is the soft limit; the hard one is raised to it when it is higher, which takes
    ``CAP_SYS_RESOURCE``. Without it, the soft limit is the daemon's hard limit, the highest it
    can give. The hard limit is never lowered: a daemon without that capability could not raise
    it back.
    """
    current = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard = current[1]
    target = _given if wanted is None else (wanted, max(wanted, hard))
    if target is None or target == current:
        yield None if wanted is None else current
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, target)
    except (OSError, ValueError):  # past the hard limit, unprivileged (or past fs.nr_open)
        target = (hard, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, target)
    try:
        yield target
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, current)


def why_not_raised(wanted: int, hard: int) -> str:
    """Why a limit of ``wanted`` open files could not be given above the hard limit ``hard``."""
    try:
        with open("/proc/sys/fs/nr_open") as f:
            ceiling = int(f.read())
    except (OSError, ValueError):
        ceiling = None
    if ceiling is not None and wanted > ceiling:
        return f"the kernel allows no process more than fs.nr_open ({ceiling})"
    return (
        f"that is above the supervisor's hard limit ({hard}), which only a supervisor with "
        "CAP_SYS_RESOURCE may raise (an unprivileged container has not)"
    )
