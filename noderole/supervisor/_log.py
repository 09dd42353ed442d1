"""The supervisor's own log: one line per event, on its stderr (a file it was started with).

The daemon and its watchdog write here; the client points stderr at ``ROOT/var/log/noderole/
supervisor.log`` so the history survives a reboot, and tells the daemon that path (or the run
directory's ``supervisor.log`` it fell back to): :func:`set_path`. Lines always go to that path,
whatever became of the file open before: before each line, stderr is opened there again when it
is no longer the file at the path (removed, moved aside by logrotate, rotated by the daemon
while the watchdog still held it), as ``logging.handlers.WatchedFileHandler`` does; SIGHUP and
the watchdog's report after the daemon's death reopen it too (:func:`reopen`). Past
:data:`MAX_BYTES` the file is rotated, keeping :data:`KEEP` old copies (``.1`` the newest).
Both can be set for the daemon with the environment variables ``NODEROLE_SUPERVISOR_LOG_BYTES``
and ``NODEROLE_SUPERVISOR_LOG_KEEP``.

Two kinds of line are treated apart, so that the evidence of a bug outlives crash-loop noise:

- :func:`log_limited`: lines that repeat (a service crash-looping) are rate-limited per key:
  the first :data:`BURST` in a :data:`WINDOW`-second window are written, the rest counted and
  summed up in one line ``suppressed K similar lines`` when the window ends;
- :func:`log_error`: an internal error (a traceback) is never rate-limited, and is written a
  second time to ``supervisor-errors.log`` beside the log, rotated on its own.

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time

from noderole.supervisor import _safeopen

__all__ = [
    "BURST",
    "ERRORS_NAME",
    "KEEP",
    "MAX_BYTES",
    "WINDOW",
    "RateLimiter",
    "flush_suppressed",
    "log",
    "log_error",
    "log_limited",
    "log_path",
    "reopen",
    "rotate",
    "set_fallback",
    "set_path",
    "set_role",
]


def _setting(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if 0 < value < 1 << 40 else default


MAX_BYTES = _setting("NODEROLE_SUPERVISOR_LOG_BYTES", 1024 * 1024)
"""The log is rotated past this size."""
KEEP = _setting("NODEROLE_SUPERVISOR_LOG_KEEP", 5)
"""How many rotated copies (``.1`` … ``.KEEP``) are kept."""
ERRORS_NAME = "supervisor-errors.log"
"""Internal errors are also written to this file, beside the log."""
BURST = 10
"""Lines of one key written per window before the rest are suppressed."""
WINDOW = 60.0
"""Seconds of one rate-limiting window."""

_role = ["noderole-supervisor"]


def set_role(name: str) -> None:
    """Tag lines with ``name`` (``noderole-supervisor``, ``noderole-supervisor-watchdog``)."""
    _role[0] = name


def rotate(path: str, keep: int) -> None:
    """``path.K-1`` -> ``path.K`` ... ``path`` -> ``path.1``: renames in one directory, no link
    followed (a missing copy is skipped)."""
    dfd = _safeopen.open_dir(os.path.dirname(path) or "/")
    name = os.path.basename(path)
    try:
        for k in range(keep, 0, -1):
            older = f"{name}.{k - 1}" if k > 1 else name
            with contextlib.suppress(FileNotFoundError):
                os.rename(older, f"{name}.{k}", src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        os.close(dfd)


_path: list[str | None] = [None]
"""The log's path (:func:`set_path`); None: no file (stderr is written as it is)."""
_path_known = [False]
"""Whether :data:`_path` was set, or taken from stderr at the first line."""


def set_path(path: str | None) -> None:
    """Write every line to ``path`` from now on (None: to stderr as it is, never rotated)."""
    _path[0] = path
    _path_known[0] = True


def log_path() -> str | None:
    """The log's path: as set, else the file stderr wrote to at the first line (a process
    started without :func:`set_path`)."""
    if not _path_known[0]:
        set_path(_stderr_path())
    return _path[0]


def _stderr_path() -> str | None:
    """The file our stderr writes to, if it is a regular file still in place."""
    try:
        path = os.readlink("/proc/self/fd/2")
        info = os.fstat(2)
        if not path.startswith("/") or not stat.S_ISREG(info.st_mode) or info.st_nlink == 0:
            return None
        return path
    except OSError:
        return None


def _at_path(path: str, info: os.stat_result) -> bool:
    """``info`` (an open file's) is the file at ``path``, and that file is not removed."""
    if info.st_nlink == 0:
        return False
    try:
        there = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (there.st_dev, there.st_ino) == (info.st_dev, info.st_ino)


def _open_at(path: str) -> None:
    """Point stdout and stderr at ``path`` (made again, 0600 in a 0700 directory, if missing)."""
    _safeopen.private_dir(os.path.dirname(path) or "/")
    fd = _safeopen.open_append(path, mode=0o600)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    finally:
        os.close(fd)


def reopen() -> None:
    """Open the log's path again (SIGHUP; the watchdog before it reports): never raises, and
    a path that cannot be opened leaves stderr as it was."""
    path = log_path()
    if path is not None:
        with contextlib.suppress(OSError):
            _open_at(path)


def _follow() -> None:
    """Before a line: stderr is the file at the log's path (opened again if it is not), and
    that file is rotated once past :data:`MAX_BYTES`."""
    path = log_path()
    if path is None:
        return
    info = os.fstat(2)
    if not _at_path(path, info):
        try:
            _open_at(path)
        except OSError:
            return  # on with the file open before: better there than nowhere
        info = os.fstat(2)
    if info.st_size > MAX_BYTES:
        rotate(path, KEEP)
        _open_at(path)


def _line(message: str) -> bytes:
    text = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {_role[0]}[{os.getpid()}]: {message}\n"
    return text.encode(errors="replace")


_fallback: list[str | None] = [None]
"""Where a line goes when the log refuses it (:func:`set_fallback`)."""


def set_fallback(path: str | None) -> None:
    """Write a line the log refuses (its file system full, or made read-only, while the file
    stays open) to ``path`` instead: the run directory's ``supervisor.log``, on ``/run``."""
    _fallback[0] = path


def log(message: str) -> None:
    """Append one line; never raises (a full disk must not take the supervisor down). A line
    the log refuses goes to :func:`set_fallback`'s file: the one that says a service's log
    cannot be written either is otherwise lost with the file system that filled."""
    line = _line(message)
    with contextlib.suppress(OSError):
        _follow()
    try:
        os.write(2, line)
    except OSError:
        fallback = _fallback[0]
        if fallback is None or fallback == log_path():
            return
        with contextlib.suppress(OSError):
            fd = _safeopen.open_append(fallback, mode=0o600)
            try:
                if os.fstat(fd).st_size > MAX_BYTES:  # /run is memory: bounded as the log is
                    os.close(fd)
                    fd = -1
                    rotate(fallback, KEEP)
                    fd = _safeopen.open_append(fallback, mode=0o600)
                os.write(fd, line)
            finally:
                if fd >= 0:
                    os.close(fd)


def log_error(message: str) -> None:
    """An internal error: to the log, never rate-limited, and to :data:`ERRORS_NAME` too."""
    log(message)
    path = log_path()
    if path is None:
        return
    errors = os.path.join(os.path.dirname(path), ERRORS_NAME)
    try:
        fd = _safeopen.open_append(errors, mode=0o600)
        try:
            if os.fstat(fd).st_size > MAX_BYTES:
                os.close(fd)
                fd = -1
                rotate(errors, KEEP)
                fd = _safeopen.open_append(errors, mode=0o600)
            os.write(fd, _line(message))
        finally:
            if fd >= 0:
                os.close(fd)
    except OSError:
        pass


class RateLimiter:
    """Per key, the first ``burst`` lines of each ``window`` seconds pass; the rest are counted.

    Times are given by the caller (a fake clock in tests). A window opens with the first line
    of a key and lasts ``window`` seconds, then the count of suppressed lines is reported once.
    """

    def __init__(self, burst: int = BURST, window: float = WINDOW) -> None:
        self.burst = burst
        self.window = window
        self._windows: dict[str, list[float]] = {}
        """key -> [window start, lines passed, lines suppressed]."""
        self._next = float("inf")
        """When the earliest window ends (nothing to look at before)."""

    def allow(self, key: str, now: float) -> tuple[bool, list[str]]:
        """Whether this line of ``key`` passes, and summaries of windows that ended first."""
        summaries = self.due(now)
        w = self._windows.get(key)
        if w is None:
            self._windows[key] = [now, 1, 0]
            self._next = min(self._next, now + self.window)
            return True, summaries
        if w[1] < self.burst:
            w[1] += 1
            return True, summaries
        w[2] += 1
        return False, summaries

    def due(self, now: float) -> list[str]:
        """Summaries of ended windows (each said once); ended windows are forgotten."""
        if now < self._next:
            return []
        out = []
        for key, (start, _, suppressed) in list(self._windows.items()):
            if now - start >= self.window:
                del self._windows[key]
                if suppressed:
                    out.append(
                        f"{key}: suppressed {int(suppressed)} similar lines in {self.window:g}s"
                    )
        self._next = min((w[0] + self.window for w in self._windows.values()), default=float("inf"))
        return out


_limiter = RateLimiter()


def log_limited(key: str, message: str, now: float | None = None) -> None:
    """Log ``message`` unless ``key`` has had :data:`BURST` lines in this window."""
    passed, summaries = _limiter.allow(key, time.monotonic() if now is None else now)
    for summary in summaries:
        log(summary)
    if passed:
        log(message)


def flush_suppressed(now: float | None = None) -> None:
    """Write the summaries of windows that ended (the daemon calls this once per loop turn)."""
    for summary in _limiter.due(time.monotonic() if now is None else now):
        log(summary)
