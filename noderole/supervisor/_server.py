"""The control socket: accept, read one JSON line, dispatch it by ``op``, answer once.

Handlers are a table ``op -> handler(request, reply)``; a handler may answer at once or later
(a stop answers when the processes are gone), but exactly once. A malformed request, a request
of another protocol version, an unknown ``op`` and a handler that raises each get an error
answer; the daemon carries on. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

from noderole.supervisor import _protocol
from noderole.supervisor._log import log_error
from noderole.supervisor._loop import Loop

__all__ = ["Handler", "Reply", "Server"]

Reply = Callable[[dict[str, Any]], None]
Handler = Callable[[dict[str, Any], Reply], None]

RETRY = {"ok": False, "retry": True, "error": "supervisor exiting"}
"""The answer of a daemon that is about to exit: the client starts a new one and asks again."""


class Server:
    """Serves the control socket from ``loop``; ``pending`` counts unanswered requests."""

    def __init__(self, loop: Loop, path: str, handlers: Mapping[str, Handler]) -> None:
        self.loop = loop
        self.path = path
        self.handlers = handlers
        self.connections = 0
        self.pending = 0
        self.listener: socket.socket | None = None

    def listen(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        address, dirfd = _protocol.socket_address(self.path)
        old = os.umask(0o177)  # the socket is born 0600: no window where others may connect
        try:
            sock.bind(address)
        finally:
            os.umask(old)
            if dirfd is not None:
                os.close(dirfd)
        sock.listen(64)
        sock.setblocking(False)
        self.listener = sock
        self.loop.add_reader(sock.fileno(), self._on_accept)

    @property
    def busy(self) -> bool:
        """A client is connected or waits for an answer."""
        return bool(self.pending or self.connections)

    def close(self) -> None:
        """Stop listening; clients already queued are told to retry with a new daemon."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        if self.listener is None:
            return
        self.loop.remove_reader(self.listener.fileno())
        self.listener.setblocking(False)
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                break
            with contextlib.suppress(OSError), conn:
                conn.sendall(_protocol.encode({"v": _protocol.PROTOCOL_VERSION, **RETRY}))
        self.listener.close()
        self.listener = None

    def _on_accept(self) -> None:
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
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
            self.handle(bytes(buffer), lambda response: self._answer(conn, response))

        self.loop.add_reader(conn.fileno(), on_readable)

    def _answer(self, conn: socket.socket, response: dict[str, Any]) -> None:
        response = {"v": _protocol.PROTOCOL_VERSION, **response}
        try:
            conn.setblocking(True)
            conn.settimeout(2.0)
            conn.sendall(_protocol.encode(response))
        except OSError:
            pass
        self._close(conn)

    def _close(self, conn: socket.socket) -> None:
        conn.close()
        self.connections -= 1

    def handle(self, data: bytes, reply: Reply) -> None:
        """Decode one request and dispatch it; ``reply`` is called once, now or later."""
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
                    f"speaks {_protocol.PROTOCOL_VERSION}: shut it down and start it again",
                }
            )
            return
        op = request.get("op")
        handler = self.handlers.get(op) if isinstance(op, str) else None
        if handler is None:
            reply({"ok": False, "error": f"unknown operation {op!r}"})
            return
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
