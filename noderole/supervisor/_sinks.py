"""Log sinks: where children's output goes, through pipes the daemon drains.

Output never goes straight to the log file: the child writes into a pipe the daemon drains. That
is what lets SIGHUP reopen a rotated log (and size rotation happen) under a child that keeps
running. When ``stdout_log == stderr_log`` both streams share one pipe, so their lines stay in
order. One :class:`LogSink` per path, shared by every stream that writes there and closed when
the last one ends. Standard library only.
"""

from __future__ import annotations

import os

from noderole.supervisor import _fdlimit, _safeopen
from noderole.supervisor._log import log, log_limited
from noderole.supervisor._loop import Loop

__all__ = ["LogSink", "Pipe", "Sinks"]


class LogSink:
    """One log file, appended to; reopened on SIGHUP; rotated by size when asked.

    Size rotation keeps one old file: ``LOG`` becomes ``LOG.1`` (replacing the previous one).
    The file is opened by :func:`._safeopen.open_append`, with the rights of the service's user
    (``uid``/``gid``) when it lies in a directory others can write: a link or hard link planted
    there is refused (the error is logged) and the output goes on to the file already open, or,
    when none is, is dropped.
    """

    def __init__(
        self,
        path: str,
        max_bytes: int | None = None,
        *,
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.uid, self.gid = uid, gid
        self.users = 0
        """How many streams (pipes) write here; the file closes when none is left."""
        self.fd = self._open()
        self.size = os.fstat(self.fd).st_size
        self.failed = False
        """The last write failed: said once in the supervisor's log, and again on recovery."""
        self.dropped = 0
        """Bytes of output lost since writes began to fail."""

    def _open(self) -> int:
        return _fdlimit.keep(_safeopen.open_append(self.path, uid=self.uid, gid=self.gid))

    def write(self, data: bytes) -> None:
        """Append ``data`` (rotating first if the file would outgrow ``max_bytes``)."""
        if self.max_bytes is not None and self.size + len(data) > self.max_bytes and self.size:
            try:
                # A rename moves a planted link, never follows it.
                _safeopen.rename_in(self.path, os.path.basename(self.path) + ".1")
            except OSError as e:
                log(f"cannot rotate {self.path}: {e}")
            self.reopen()
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError as e:
            # A full disk must not stop the supervisor; the output is lost, the service lives on.
            # Said once, naming the file and the fix: a log that stops growing is otherwise
            # silent, and a file system that filled over weeks leaves the file open at boot.
            if not self.failed:
                fix = _safeopen.fix_for(e)
                log(
                    f"cannot write the log {self.path}: {e.strerror or e}; its output is dropped "
                    f"until it can be written{f' ({fix})' if fix else ''}"
                )
            self.failed = True
            self.dropped += len(view)
            self.size += len(data) - len(view)
            return
        self.size += len(data)
        if self.failed:
            log(f"the log {self.path} is written again; {self.dropped} bytes of output were lost")
            self.failed = False
            self.dropped = 0

    def reopen(self) -> None:
        """Close and open the path again: after logrotate moved the file away."""
        try:
            fd = self._open()
        except OSError as e:
            log(f"cannot reopen {self.path}: {e}; still writing to the file open before")
            self.size = 0  # rotate no more until a reopen succeeds
            return  # keep writing to the old file rather than nowhere
        os.close(self.fd)
        self.fd = fd
        self.size = os.fstat(fd).st_size

    def close(self) -> None:
        """Close the file."""
        os.close(self.fd)


class Sinks:
    """The open log sinks by path, counted by the pipes that write to them."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop
        self.by_path: dict[str, LogSink] = {}
        self.failing: dict[str, int] = {}
        """Logs whose last write failed when their sink closed, and the bytes lost so far: a
        crash-looping service opens its log again at every start, and the failure was said
        again at each one."""

    def output(
        self,
        path: str | None,
        max_bytes: int | None,
        *,
        uid: int | None = None,
        gid: int | None = None,
        name: str = "",
    ) -> int:
        """A write fd for a child's stream: a pipe into ``path``'s sink, or /dev/null.

        A log that cannot be opened (a planted link, a full disk) is logged, naming service
        ``name``, and the stream goes to /dev/null: the service runs without that log. At the
        limit of open files (:class:`._fdlimit.Exhausted`) the start fails instead.
        """
        if not path:
            return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        sink = self.by_path.get(path)
        if sink is None:
            try:
                sink = LogSink(path, uid=uid, gid=gid)
            except _fdlimit.Exhausted:
                raise  # no start can keep anything more: say so, rather than run without a log
            except OSError as e:
                # e names the file relative to its directory (opened through a descriptor).
                # Rate-limited by path: a crash-looping service tries again at every start.
                fix = _safeopen.fix_for(e)
                log_limited(
                    f"cannot open {path}",
                    f"{name}: cannot open its log {path}: {e.strerror or e}; its output is "
                    f"dropped until its next start{f' ({fix})' if fix else ''}",
                )
                return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
            if path in self.failing:  # said when it began: said again only when it ends
                sink.failed, sink.dropped = True, self.failing.pop(path)
            self.by_path[path] = sink
        sink.users += 1
        if max_bytes is not None:
            sink.max_bytes = max_bytes
        try:
            r, w = os.pipe2(os.O_CLOEXEC)
        except OSError:
            self.release(sink)
            raise
        try:
            r = _fdlimit.keep(r)  # held while the service runs; the write end is the child's
        except OSError:
            os.close(w)
            self.release(sink)
            raise
        Pipe(self, r, sink)
        return w

    def release(self, sink: LogSink) -> None:
        sink.users -= 1
        if sink.users <= 0:
            sink.close()
            self.by_path.pop(sink.path, None)
            if sink.failed:
                self.failing[sink.path] = sink.dropped

    def reopen_all(self) -> None:
        """SIGHUP: reopen every log (after logrotate moved them away)."""
        for sink in self.by_path.values():
            sink.reopen()


class Pipe:
    """The read end of a child's output pipe, copied into a sink until the writers are gone."""

    def __init__(self, sinks: Sinks, fd: int, sink: LogSink) -> None:
        self.sinks = sinks
        self.fd = fd
        self.sink = sink
        self.closed = False
        os.set_blocking(fd, False)
        sinks.loop.add_reader(fd, self.on_readable)

    def on_readable(self) -> None:
        if self.closed:
            return  # the fd number may already belong to someone else
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.sink.write(data)
            return
        self.closed = True
        self.sinks.loop.remove_reader(self.fd)
        os.close(self.fd)
        self.sinks.release(self.sink)
