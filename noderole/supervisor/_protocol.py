"""The control protocol: one JSON request, one JSON response, per unix-socket connection.

Request: ``{"v": 1, "op": "start"|"stop"|"restart"|"status"|"shutdown"|"ping"|"modules", ...}``
+ newline (``modules``, for diagnostics, answers the names of the daemon's loaded modules).
Response: ``{"v": 1, "ok": true, "statuses": [...]}`` or ``{"v": 1, "ok": false, "error": "..."}``
+ newline, then the daemon closes the connection. A daemon that is about to exit answers
``{"ok": false, "retry": true}``: the client starts a new daemon and asks again.

Also the names of the files in ``run_dir``. Standard library only (the daemon imports it).
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = [
    "LOCK_NAME",
    "MAX_MESSAGE",
    "PID_NAME",
    "PROTOCOL_VERSION",
    "SOCKET_NAME",
    "STARTER_LOCK_NAME",
    "STATE_NAME",
    "decode",
    "encode",
    "launch_source",
    "socket_address",
]


def launch_source(module: str) -> str:
    """``python -I -S -c`` source that runs ``noderole.supervisor.MODULE.main(sys.argv[2:])``.

    The daemon runs with ``-I -S``: no site-packages, no ``.pth`` files, no environment
    variables, so nothing but the standard library is importable by accident. ``sys.argv[1]`` is
    the directory that holds the ``noderole`` package, put first on ``sys.path``; importing
    ``noderole.supervisor.X`` then runs ``noderole/__init__.py``, which imports nothing but its
    version until a name is asked for (~0.4 MB), and ``noderole/supervisor/__init__.py``, which
    imports nothing at all until asked.
    """
    return (
        "import sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        f"from noderole.supervisor.{module} import main\n"
        "sys.exit(main(sys.argv[2:]))\n"
    )


PROTOCOL_VERSION = 1
"""Bumped on any incompatible change; a daemon refuses requests of another version."""

SOCKET_NAME = "supervisor.sock"
"""Control socket (mode 0600)."""
PID_NAME = "supervisor.pid"
"""The daemon's own pid (never a child's: children's pids go to their spec's ``pidfile``)."""
STATE_NAME = "state.json"
"""Services, their processes (pid, pgid, start ticks) and final statuses; survives the daemon."""
LOCK_NAME = "supervisor.lock"
"""flock held by the live daemon for its whole life: at most one daemon per run_dir."""
STARTER_LOCK_NAME = "starter.lock"
"""flock held by a client while it starts a daemon: two callers never start two."""

MAX_MESSAGE = 4 * 1024 * 1024
"""Refuse larger messages (a request is a few kB)."""


def encode(message: dict[str, Any]) -> bytes:
    """One message as a JSON line."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode(data: bytes) -> dict[str, Any]:
    """Parse one JSON line; raises ValueError when it is not a JSON object."""
    value = json.loads(data.decode())
    if not isinstance(value, dict):
        raise ValueError("a message must be a JSON object")
    return value


def socket_address(path: str) -> tuple[str, int | None]:
    """An address ``bind``/``connect`` accept for ``path``, and an fd to close afterwards.

    ``sun_path`` holds 107 bytes; a deep ``--root`` (pytest's tmp_path) exceeds it. Then the
    directory is opened and the socket named through ``/proc/self/fd/N/``, which is short.
    """
    if len(os.fsencode(path)) < 100:
        return path, None
    dirfd = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
    return f"/proc/self/fd/{dirfd}/{os.path.basename(path)}", dirfd
