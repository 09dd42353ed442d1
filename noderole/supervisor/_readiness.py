"""Readiness checks that never block the daemon's event loop.

A check is a dict (JSON from the client)::

    {"kind": "tcp", "host": "127.0.0.1", "port": 8092, "timeout": 30}
    {"kind": "http", "url": "http://127.0.0.1:8092/healthz", "timeout": 30}
    {"kind": "file", "path": "/local/path"}            # or "paths": [...], "require": "all"|"any"
    {"kind": "socket", "path": "/local/unix.sock"}     # a unix stream socket accepts
    {"kind": "command", "argv": ["/bin/check", "x"]}   # exits 0

The daemon calls :meth:`Probe.check` every :data:`INTERVAL` seconds until it returns True or the
``timeout`` (default 60 s) passes. tcp and unix sockets use non-blocking connects; a file is a
stat; a command is a child process polled without waiting; http runs one short-lived thread per
attempt (urllib is imported only then), because a correct non-blocking HTTP client is not worth
its code here. An https check does not verify the certificate: readiness asks "does it answer",
not "is it who it claims to be".

Standard library only (the daemon imports it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import subprocess
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_TIMEOUT", "INTERVAL", "Probe", "make_probe"]

INTERVAL = 0.025
"""Seconds between two checks."""
DEFAULT_TIMEOUT = 60.0
"""Seconds before a check without ``timeout`` gives up (the service stays ``running``)."""


class Probe:
    """One readiness check: :meth:`check` is cheap and never blocks."""

    def check(self) -> bool:
        """True once the service is ready."""
        raise NotImplementedError

    def close(self) -> None:
        """Release whatever the check holds (a socket, a child process)."""


class _FileProbe(Probe):
    def __init__(self, paths: list[str], require: str) -> None:
        self.paths = paths
        self.require_all = require != "any"

    def check(self) -> bool:
        found = [os.path.exists(p) for p in self.paths]
        return all(found) if self.require_all else any(found)


class _ConnectProbe(Probe):
    """Non-blocking connect, finished on a later tick (tcp) or at once (unix)."""

    def __init__(self, family: int, address: Any) -> None:
        self.family = family
        self.address = address
        self.sock: socket.socket | None = None

    def check(self) -> bool:
        if self.sock is None:
            self.sock = socket.socket(self.family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
            try:
                err = self.sock.connect_ex(self.address)
            except OSError:
                err = errno.ENOENT
            if err == 0:
                self.close()
                return True
            if err not in (errno.EINPROGRESS, errno.EAGAIN):
                self.close()
            return False
        _, writable, _ = select.select([], [self.sock], [], 0)
        if not writable:
            return False
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        self.close()
        return err == 0

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class _HttpProbe(Probe):
    def __init__(self, url: str) -> None:
        self.url = url
        self.thread: threading.Thread | None = None
        self.result: bool | None = None

    def _attempt(self) -> None:
        import ssl
        import urllib.request

        context = ssl._create_unverified_context()
        try:
            with urllib.request.urlopen(self.url, timeout=1.0, context=context) as response:
                self.result = 200 <= response.status < 300
        except Exception:
            self.result = False

    def check(self) -> bool:
        if self.thread is None:
            self.result = None
            self.thread = threading.Thread(target=self._attempt, daemon=True)
            self.thread.start()
            return False
        if self.thread.is_alive():
            return False
        self.thread.join()
        self.thread = None
        return bool(self.result)


class _CommandProbe(Probe):
    def __init__(self, argv: list[str], environment: dict[str, str]) -> None:
        self.argv = argv
        self.environment = environment
        self.proc: subprocess.Popen[bytes] | None = None

    def check(self) -> bool:
        if self.proc is None:
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    env=self.environment,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError:
                return False
            return False
        code = self.proc.poll()
        if code is None:
            return False
        self.proc = None
        return code == 0

    def close(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait()
            self.proc = None


def make_probe(check: dict[str, Any], environment: dict[str, str]) -> Probe:
    """Build the probe a readiness dict describes; ValueError names a bad dict."""
    kind = check.get("kind")
    factories: dict[str, Callable[[], Probe]] = {
        "file": lambda: _FileProbe(
            list(check.get("paths") or [check["path"]]), str(check.get("require", "all"))
        ),
        "tcp": lambda: _ConnectProbe(
            socket.AF_INET6 if ":" in check["host"] else socket.AF_INET,
            (check["host"], int(check["port"])),
        ),
        "socket": lambda: _ConnectProbe(socket.AF_UNIX, check["path"]),
        "http": lambda: _HttpProbe(str(check["url"])),
        "command": lambda: _CommandProbe([str(a) for a in check["argv"]], environment),
    }
    if kind not in factories:
        raise ValueError(f"readiness kind {kind!r} is unknown (use one of {', '.join(factories)})")
    try:
        return factories[kind]()
    except KeyError as e:
        raise ValueError(f"readiness check {kind!r} needs the key {e.args[0]!r}") from None
