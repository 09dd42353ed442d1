"""What to say when no process or thread could be made: which limit was reached, and its figures.

``fork``, ``clone`` and ``posix_spawn`` fail with ``EAGAIN`` ("Resource temporarily
unavailable"), and Python's ``Thread.start`` with ``RuntimeError("can't start new thread")``,
once a limit on tasks is reached: the pids controller of the process's cgroup (``pids.max``: a
container's, a systemd unit's ``TasksMax=``), the user's ``RLIMIT_NPROC`` (root is exempt), or
the kernel's ``threads-max`` and ``pid_max``. Said as it is, "Resource temporarily unavailable"
names none of them, and a traceback at boot names less. :func:`explain` names the limit that
was reached when it can be read (a cgroup's maximum and how many tasks it holds), else every
candidate, and what to do.

Standard library only (the daemon imports it), and only once something has failed.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator

__all__ = ["FIX", "explain", "is_exhausted", "refusal"]

FIX = "raise that limit or end what holds it, then run the command again"

_THREAD_MESSAGE = "can't start new thread"


def is_exhausted(error: BaseException) -> bool:
    """True for a failure to make a process or thread because a limit on tasks was reached."""
    if isinstance(error, OSError):
        return error.errno == errno.EAGAIN
    return isinstance(error, RuntimeError) and _THREAD_MESSAGE in str(error)


def refusal(error: OSError) -> str:
    """What the machine refused, in words: :func:`explain` for a limit on tasks reached, else
    the error's own words."""
    return explain(error) if is_exhausted(error) else str(error.strerror or error)


def explain(error: BaseException | None = None) -> str:
    """``"<what failed>: the limit on processes and threads was reached (<which, with its
    figures>); <what to do>"``; ``error`` gives the first part (its ``strerror``)."""
    if isinstance(error, OSError) and error.strerror:
        what = error.strerror
    elif error is not None:
        what = str(error)
    else:
        what = "no process or thread could be made"
    return f"{what}: the limit on processes and threads was reached ({_which()}); {FIX}"


def _which() -> str:
    found = _limited_cgroup()
    if found is not None:
        path, limit, current = found
        if int(current) >= int(limit):
            return f"pids.max of cgroup {path} is {limit}, {current} in use"
        words = [f"pids.max of cgroup {path} ({limit}, {current} in use now)"]
    else:
        words = ["the pids.max of this process's cgroup"]
    if os.geteuid() != 0:  # root is exempt from RLIMIT_NPROC
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
        if soft != resource.RLIM_INFINITY:
            words.append(f"RLIMIT_NPROC ({soft})")
    for name in ("threads-max", "pid_max"):
        value = _read(f"/proc/sys/kernel/{name}")
        if value is not None:
            words.append(f"kernel.{name} ({value})")
    return ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else words[0]


def _limited_cgroup() -> tuple[str, str, str] | None:
    """The nearest cgroup of this process, itself or an ancestor, whose pids controller is at
    its maximum, else the nearest with a maximum at all: (its path, pids.max, pids.current).
    None when none has one, or none can be read."""
    text = _read("/proc/self/cgroup")
    if text is None:
        return None
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if controllers == "":  # cgroup v2
            bases = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        elif "pids" in controllers.split(","):
            bases = ["/sys/fs/cgroup/pids", f"/sys/fs/cgroup/{controllers}"]
        else:
            continue
        for base in bases:
            limited = list(_limits_on_the_way_up(base, path))
            for found in limited:
                if int(found[2]) >= int(found[1]):
                    return found
            if limited:
                return limited[0]
    return None


def _limits_on_the_way_up(base: str, path: str) -> Iterator[tuple[str, str, str]]:
    """Each cgroup from ``path`` up to the root of the hierarchy mounted at ``base`` that has a
    finite pids.max: (its path, pids.max, pids.current), nearest first."""
    while True:
        directory = base + path.rstrip("/")
        limit = _read(os.path.join(directory, "pids.max"))
        current = _read(os.path.join(directory, "pids.current"))
        if limit is not None and current is not None and limit.isdigit() and current.isdigit():
            yield path or "/", limit, current
        if path in ("", "/"):
            return
        path = os.path.dirname(path.rstrip("/"))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.read(4096).strip()
    except OSError:
        return None
