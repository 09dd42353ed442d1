"""The control socket: accept, read one JSON line, say hello, dispatch it by ``op``, answer once.

Handlers are a table ``op -> handler(request, reply)``; a handler may answer at once or later
(a stop answers when the processes are gone), but exactly once. A malformed request, a request
of another protocol version, an unknown ``op`` and a handler that raises each get an error
answer; the daemon carries on.

An answer is written without blocking: what the client's socket does not take at once is sent
by the loop as the client reads it, and a client that stops reading (suspended, or never meant
to) is dropped after :data:`ANSWER_STALL` seconds, never holding up the loop (and with it every
respawn and every other client). Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import time
from collections.abc import Callable, Mapping

from noderole.supervisor import _protocol
from noderole.supervisor._log import log, log_error, log_limited
from noderole.supervisor._loop import Loop, Timer

TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
if TYPE_CHECKING:
    from typing import Any

__all__ = ["BACKLOG", "Handler", "Reply", "Server"]

Reply = Callable[[dict[str, "Any"]], None]  # quoted: Any is the checker's alone
Handler = Callable[[dict[str, "Any"], Reply], None]

BACKLOG = 1024
"""Listen backlog of each control socket."""
ACCEPTED = _protocol.ACCEPTED

RETRY = {"ok": False, "retry": True, "error": "supervisor exiting"}
"""The answer of a daemon that is about to exit: the client starts a new one and asks again."""
ANSWER_STALL = 2.0
"""Seconds a client may leave its answer unread (not a byte taken) before it is dropped."""
ANSWER_LIMIT = 30.0
"""Seconds an answer may take to write in all, however the client trickles it in."""


class _Outgoing:
    """An answer its client has not taken whole yet: the rest, and when it last took some."""

    __slots__ = ("conn", "data", "limit", "moved", "timer")

    def __init__(self, conn: socket.socket, data: memoryview) -> None:
        self.conn = conn
        self.data = data
        self.moved = time.monotonic()
        self.limit = self.moved + ANSWER_LIMIT
        self.timer: Timer | None = None

    def send(self) -> bool:
        """Send what the socket takes now; True once nothing is left to do (all sent, or the
        client is gone)."""
        try:
            sent = self.conn.send(self.data)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        self.data = self.data[sent:]
        self.moved = time.monotonic()
        return not self.data

    def due(self) -> float:
        """When the client is dropped unless it takes more."""
        return min(self.moved + ANSWER_STALL, self.limit)


class Server:
    """Serves the control socket from ``loop``; ``pending`` counts unanswered requests.

    ``abstract`` is the daemon's abstract-namespace socket (bound by the daemon at start-up, held
    for its whole life: see :func:`~._protocol.abstract_address`); it is served beside the path
    socket and never closed before the process ends. Only root and the daemon's own uid may
    talk to either (``SO_PEERCRED``): the abstract name has no file mode to keep others out.
    """

    def __init__(
        self,
        loop: Loop,
        path: str,
        handlers: Mapping[str, Handler],
        abstract: socket.socket | None = None,
    ) -> None:
        self.loop = loop
        self.path = path
        self.handlers = handlers
        self.abstract = abstract
        self.connections = 0
        self.pending = 0
        self.outgoing: dict[int, _Outgoing] = {}
        """Answers being written, by file descriptor (each still counted in ``connections``)."""
        self.listener: socket.socket | None = None
        self.listener_inode: tuple[int, int] | None = None

    def listen(self) -> None:
        """Bind the path socket (replacing a leftover) and serve it and the abstract one."""
        self._bind_path()
        if self.abstract is not None:
            self.abstract.setblocking(False)
            listener = self.abstract
            self.loop.add_reader(listener.fileno(), lambda: self._on_accept(listener))

    def _bind_path(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        address, dirfd = _protocol.socket_address(self.path)
        old = os.umask(0o177)  # the socket is born 0600: no window where others may connect
        try:
            sock.bind(address)
            st = os.stat(self.path)
        except BaseException:
            sock.close()
            raise
        finally:
            os.umask(old)
            if dirfd is not None:
                os.close(dirfd)
        # Beyond the clients in flight (the native backend keeps a few per apply), a deep
        # backlog absorbs a burst of other callers; a client also retries EAGAIN.
        sock.listen(BACKLOG)
        sock.setblocking(False)
        self.listener = sock
        self.listener_inode = (st.st_dev, st.st_ino)
        self.loop.add_reader(sock.fileno(), lambda: self._on_accept(sock))

    def path_is_ours(self) -> bool:
        """The path socket still exists and is the one this server bound."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.listener_inode

    def rebind(self) -> None:
        """Bind the path socket again (after its run directory was removed under the daemon)."""
        if self.listener is not None:
            self.loop.remove_reader(self.listener.fileno())
            self.listener.close()
            self.listener = None
        self._bind_path()

    @property
    def busy(self) -> bool:
        """A client is connected or waits for an answer."""
        return bool(self.pending or self.connections)

    def close(self) -> None:
        """Stop listening; clients already queued are told to retry with a new daemon.

        The abstract socket stops being served but stays bound until the process ends: a new
        daemon cannot start (and write its state) while this one is still writing its own.
        """
        if self.path_is_ours():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        for listener in (self.listener, self.abstract):
            if listener is None:
                continue
            self.loop.remove_reader(listener.fileno())
            listener.setblocking(False)
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    break
                with contextlib.suppress(OSError), conn:
                    conn.sendall(_protocol.encode({"v": _protocol.PROTOCOL_VERSION, **RETRY}))
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        self._drain()

    def _on_accept(self, listener: socket.socket) -> None:
        # Every queued connection at once (bounded): under a burst, one per wake-up would
        # leave most of the batch for later iterations.
        for _ in range(BACKLOG):
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            self._serve(conn)

    def _serve(self, conn: socket.socket) -> None:
        try:
            pid, uid = _protocol.peer_credentials(conn)
        except OSError:
            conn.close()
            return
        if not _protocol.trusted(uid):
            # A burst a minute per user: a local user knocking again and again on the abstract
            # name must not rotate the log's history away.
            log_limited(
                f"refused uid {uid}", f"refused a control connection from pid {pid} (uid {uid})"
            )
            conn.close()
            return
        conn.setblocking(False)
        buffer = bytearray()
        self.connections += 1
        finished = [False]

        def on_readable() -> None:
            if finished[0]:
                return
            try:
                chunk = conn.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            buffer.extend(chunk)
            if chunk and b"\n" not in chunk and len(buffer) < _protocol.MAX_MESSAGE:
                return
            finished[0] = True
            self.loop.remove_reader(conn.fileno())
            if not buffer.strip():
                self._close(conn)
                return
            if chunk and _hung_up(conn):
                # The client gave up waiting (this daemon was stopped or busy) and was told it
                # failed: acting on its request now would do what it reported undone.
                log(f"dropped a request whose client gave up: {bytes(buffer[:120])!r}")
                self._close(conn)
                return
            try:
                self.handle(
                    bytes(buffer),
                    lambda response: self._answer(conn, response),
                    lambda: self._hello(conn),
                )
            except BaseException:
                # A bug that escaped handle (the loop logs it): the client gets EOF rather than
                # waiting for ever, and the connection is not counted for ever (the daemon
                # would never be idle, and never exit).
                self._close(conn)
                raise

        self.loop.add_reader(conn.fileno(), on_readable)

    def _answer(self, conn: socket.socket, response: dict[str, Any]) -> None:
        """Send the answer and close; what the socket does not take now is left to the loop."""
        if conn.fileno() < 0:
            return
        response = {"v": _protocol.PROTOCOL_VERSION, **response}
        out = _Outgoing(conn, memoryview(_protocol.encode(response)))
        if out.send():
            self._close(conn)
            return
        fd = conn.fileno()
        self.outgoing[fd] = out
        self.loop.add_writer(fd, lambda: self._on_writable(out))
        self._watch(out)

    def _on_writable(self, out: _Outgoing) -> None:
        if out.send():
            self._drop(out)

    def _watch(self, out: _Outgoing) -> None:
        out.timer = self.loop.call_later(out.due() - time.monotonic(), lambda: self._overdue(out))

    def _overdue(self, out: _Outgoing) -> None:
        if out.conn.fileno() < 0:
            return
        if time.monotonic() < out.due():
            self._watch(out)  # it took some meanwhile
            return
        # A stream socket is reported writable only once most of its buffer is read: a
        # client that reads, slowly, may have room all the same.
        before = len(out.data)
        if out.send():
            self._drop(out)
            return
        if len(out.data) < before:
            self._watch(out)
            return
        self._gave_up(out, "dropped a client")

    def _gave_up(self, out: _Outgoing, what: str) -> None:
        """Close the connection of a client that took none of its answer for too long."""
        try:
            pid = _protocol.peer_credentials(out.conn)[0]
        except OSError:
            pid = 0
        log_limited(
            "unread answer",
            f"{what} (pid {pid}) that took none of its answer for {ANSWER_STALL:g}s: "
            f"{len(out.data)} bytes of it were not sent",
        )
        self._drop(out)

    def _drop(self, out: _Outgoing) -> None:
        """The answer is written, or its client is gone or too slow: close the connection."""
        fd = out.conn.fileno()
        if fd < 0:
            return
        self.loop.remove_reader(fd)
        self.outgoing.pop(fd, None)
        if out.timer is not None:
            out.timer.cancel()
        self._close(out.conn)

    def _drain(self) -> None:
        """At exit: the answers still being written get :data:`ANSWER_STALL` seconds in all,
        then the process ends. Not more: the next daemon (and every client, which would take
        a daemon that does not answer for a hung one) waits for this one to be gone."""
        if not self.outgoing:
            return
        end = time.monotonic() + ANSWER_STALL
        with selectors.DefaultSelector() as selector:
            for fd, pending in self.outgoing.items():
                self.loop.remove_reader(fd)
                selector.register(fd, selectors.EVENT_WRITE, pending)
            while self.outgoing:
                now = time.monotonic()
                for late in [o for o in self.outgoing.values() if now >= min(o.due(), end)]:
                    selector.unregister(late.conn)
                    self._gave_up(late, "exiting, dropped a client")
                if not self.outgoing:
                    break
                wait = min(min(o.due(), end) for o in self.outgoing.values()) - now
                for key, _ in selector.select(max(0.0, wait)):
                    ready: _Outgoing = key.data
                    if ready.send():
                        selector.unregister(ready.conn)
                        self._drop(ready)

    def _hello(self, conn: socket.socket) -> None:
        # The client now waits as long as the request may take, not just the hello timeout.
        with contextlib.suppress(OSError):
            conn.send(_protocol.encode({"v": _protocol.PROTOCOL_VERSION, **ACCEPTED}))

    def _close(self, conn: socket.socket) -> None:
        if conn.fileno() < 0:
            return  # closed already: counted once
        conn.close()
        self.connections -= 1

    def handle(self, data: bytes, reply: Reply, hello: Callable[[], None] | None = None) -> None:
        """Decode one request and dispatch it; ``reply`` is called once, now or later.

        ``hello`` is called first for a request of this protocol naming a known operation (an
        older or newer client gets just the one-line error it can read).
        """
        try:
            request = _protocol.decode(data)
        except ValueError as e:
            reply({"ok": False, "error": f"malformed request: {e}"})
            return
        version = request.get("v")
        if version != _protocol.PROTOCOL_VERSION:
            reply(
                {
                    "ok": False,
                    "error": f"protocol version {version!r} is not supported; this supervisor "
                    f"speaks {_protocol.PROTOCOL_VERSION} (another version of noderole started "
                    "it): `noderole stop` ends it, stopping every service it runs",
                }
            )
            return
        op = request.get("op")
        handler = self.handlers.get(op) if isinstance(op, str) else None
        if handler is None:
            reply({"ok": False, "error": f"unknown operation {op!r}"})
            return
        if hello is not None:
            hello()
        self.pending += 1
        answered = [False]

        def done(response: dict[str, Any]) -> None:
            if answered[0]:
                return  # one answer per request, even if a bug below raises after it
            answered[0] = True
            self.pending -= 1
            reply(response)

        try:
            handler(request, done)
        except (KeyError, TypeError, ValueError) as e:
            done({"ok": False, "error": f"bad {op} request: {type(e).__name__}: {e}"})
        except Exception as e:
            import traceback

            log_error(f"internal error in {op!r}:\n{traceback.format_exc()}")
            done({"ok": False, "error": f"internal error in {op!r}: {type(e).__name__}: {e}"})


def _hung_up(conn: socket.socket) -> bool:
    """The peer has closed its end (EOF is waiting after its request)."""
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
