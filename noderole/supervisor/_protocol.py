"""The control protocol: one JSON request, one JSON response, per unix-socket connection.

Request: ``{"v": 2, "op": "start"|"stop"|"restart"|"status"|"shutdown"|"ping"|"modules", ...}``
+ newline (``modules``, for diagnostics, answers the names of the daemon's loaded modules).
As soon as the daemon has read a well-formed request it answers ``{"v": 2, "accepted": true}`` +
newline (the hello: a client that gets none within :data:`HELLO_TIMEOUT` knows the daemon is not
answering, without waiting the whole request timeout). Then the response: ``{"v": 2, "ok": true,
"statuses": [...]}`` or ``{"v": 2, "ok": false, "error": "..."}`` + newline, and the daemon closes
the connection. A daemon that is about to exit answers
``{"ok": false, "retry": true}``: the client starts a new daemon and asks again.

The daemon listens on two addresses: ``run_dir/supervisor.sock`` and an abstract-namespace name
derived from the node root's device and inode (:func:`abstract_address`). The abstract name is
held by the kernel for the daemon's whole life and vanishes with it: no file deletion can undo it,
so it is what keeps a node to one daemon, and what a client finds the daemon by when the run
directory was removed under it. Either side checks the other's uid (``SO_PEERCRED``).

Also the names of the files in ``run_dir``. Standard library only (the daemon imports it).
"""

from __future__ import annotations

import _socket  # not socket: its enums and selectors cost a client's start-up ~4 ms
import os
import sys

from noderole.supervisor import _jsontext as jsontext

TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "ACCEPTED",
    "HELLO_TIMEOUT",
    "LOCK_NAME",
    "MAX_MESSAGE",
    "PID_NAME",
    "PROTOCOL_VERSION",
    "SOCKET_NAME",
    "STARTER_LOCK_NAME",
    "STATE_NAME",
    "abstract_address",
    "anchor_identity",
    "anchor_path",
    "decode",
    "encode",
    "launch_source",
    "listener",
    "peer_credentials",
    "socket_address",
    "trusted",
]


def launch_source(module: str) -> str:
    """``python -I -S -c`` source that runs ``noderole.supervisor.MODULE.main(sys.argv[2:])``.

    The daemon runs with ``-I -S``: no site-packages, no ``.pth`` files, no environment
    variables, so nothing but the standard library is importable by accident. ``sys.argv[1]`` is
    the directory that holds the ``noderole`` package. The ``noderole`` package is registered as
    a bare module whose path is that package's directory, so ``noderole/__init__.py`` (the
    public API's lazy table, and ``typing`` with it) never runs in the daemon: only
    ``noderole/supervisor/__init__.py``, which imports nothing but ``sys`` until asked.
    """
    return (
        "import sys\n"
        "package = type(sys)('noderole')\n"
        "package.__path__ = [sys.argv[1] + '/noderole']\n"
        "sys.modules['noderole'] = package\n"
        f"from noderole.supervisor.{module} import main\n"
        "sys.exit(main(sys.argv[2:]))\n"
    )


PROTOCOL_VERSION = 3
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

ACCEPTED = {"accepted": True}
"""The hello: the daemon has read the request and is working on it."""
HELLO_TIMEOUT = 2.0
"""Seconds a client waits to connect and for the hello before it reports the daemon hung."""

MAX_MESSAGE = 4 * 1024 * 1024
"""Refuse larger messages (a request is a few kB)."""


def encode(message: dict[str, Any]) -> bytes:
    """One message as a JSON line."""
    return jsontext.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode(data: bytes) -> dict[str, Any]:
    """Parse one JSON line; raises ValueError when it is not a JSON object.

    JSON nested too deeply for the parser (which recurses) is a ValueError too, as in
    ``_state.parse_state``: not a RecursionError that would escape the daemon's error answers.
    """
    try:
        value = jsontext.loads(data.decode())
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
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


def _sha256_hex(data: bytes) -> str:
    from noderole.supervisor._digest import sha256

    return sha256(data).hexdigest()


def abstract_address(run_dir: str) -> str:
    """The abstract-namespace socket name of the daemon serving ``run_dir``.

    Derived from the device and inode of the node root (``ROOT`` of ``ROOT/run/noderole``; for
    another run dir, its parent's, plus its name), so it survives ``rm -rf`` of the run dir and a
    scratch root made again at the same path gets a new one. Raises OSError if the root is gone.
    """
    name = _anchor(run_dir)[1]
    dev, ino = anchor_identity(run_dir)
    digest = _sha256_hex(f"{dev}:{ino}:{name}".encode())[:32]
    return f"\0noderole-supervisor-{digest}"


def _anchor(run_dir: str) -> tuple[str, str]:
    """The directory a run dir hangs from (the node root), and the name below it."""
    run_dir = os.path.abspath(run_dir)
    tail = "/run/noderole"
    if run_dir.endswith(tail):
        return run_dir[: -len(tail)] or "/", tail
    return os.path.dirname(run_dir), os.path.basename(run_dir)


def anchor_path(run_dir: str) -> str:
    """The node root of ``run_dir`` (``ROOT`` of ``ROOT/run/noderole``; else its parent)."""
    return _anchor(run_dir)[0]


def anchor_identity(run_dir: str) -> tuple[int, int]:
    """``(st_dev, st_ino)`` of the node root of ``run_dir``; OSError if it is gone.

    The daemon is the node root's as it was when the daemon started: that root removed (a
    scratch root deleted) or made again at the same path is no longer the daemon's node.
    """
    st = os.stat(anchor_path(run_dir))
    return st.st_dev, st.st_ino


def listener(address: str) -> tuple[int, int] | None:
    """``(pid, uid)`` of the process listening on the abstract ``address``; None when nothing
    listens there, or when who does cannot be told.

    Asked over a connection (``SO_PEERCRED`` gives the listener's credentials before it
    accepts); a listener whose queue is full (one that never accepts) is looked up in ``/proc``
    instead: the socket's inode in ``/proc/net/unix``, then the process holding it.
    """
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        sock.setblocking(False)
        try:
            sock.connect(address)
        except (ConnectionRefusedError, FileNotFoundError):
            return None
        except BlockingIOError:  # its queue is full
            return _listener_from_proc(address)
        return peer_credentials(sock)
    except OSError:
        return None
    finally:
        sock.close()


def _listener_from_proc(address: str) -> tuple[int, int] | None:
    shown = "@" + address[1:]  # how /proc/net/unix writes an abstract name
    try:
        with open("/proc/net/unix", "rb") as table:
            rows = table.read().decode(errors="replace").splitlines()[1:]
    except OSError:
        return None
    # Num RefCount Protocol Flags Type St Inode Path
    sockets = {f"socket:[{row[6]}]" for row in map(str.split, rows) if row[7:8] == [shown]}
    if not sockets:
        return None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                if os.readlink(f"/proc/{entry}/fd/{fd}") in sockets:
                    return int(entry), os.stat(f"/proc/{entry}").st_uid
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return None


def trusted(uid: int) -> bool:
    """A peer either side may talk to: root, or the user running noderole (a scratch root)."""
    return uid in (0, os.getuid())


def peer_credentials(sock: _socket.socket) -> tuple[int, int]:
    """``(pid, uid)`` of the process at the other end of a connected unix socket."""
    # struct ucred: three native C ints (int.from_bytes, not struct: one extension fewer)
    data = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    pid, uid = (int.from_bytes(data[i : i + 4], sys.byteorder, signed=True) for i in (0, 4))
    return pid, uid
