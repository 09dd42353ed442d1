"""Starting one supervised process, and the log files its output goes to.

The child gets exactly the spec's environment, its user/group (with the user's supplementary
groups, as ``initgroups`` would), its working directory, stdin from /dev/null, a session and
process group of its own (so a stop reaches its grandchildren), and ``PR_SET_PDEATHSIG=SIGKILL``
(so it dies with a SIGKILLed supervisor instead of running on unsupervised).

Output never goes straight to the log file: the child writes into a pipe the daemon drains. That
is what lets SIGHUP reopen a rotated log (and size rotation happen) under a child that keeps
running. When ``stdout_log == stderr_log`` both streams share one pipe, so their lines stay in
order.

How the parent-death signal is set matters for respawn latency. Setting it from Python
(``preexec_fn``) forces a full ``fork`` of the ~10 MB daemon and runs Python code in the child:
~2.9 ms per start, measured. util-linux's ``setpriv --pdeathsig KILL -- ARGV`` sets it and execs
the command, and lets subprocess use ``vfork``: ~0.3 ms. So the daemon uses ``setpriv`` when it
has it and falls back to ``preexec_fn``. With ``setpriv`` a child whose supervisor died in the
instant before the signal was set is not caught by it; the next daemon's leftover sweep (state
file + process start times) still ends it.

Standard library only (the daemon imports it).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import grp
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

__all__ = ["LogSink", "SpawnError", "settle", "setpriv_prefix", "spawn"]

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


class SpawnError(Exception):
    """The process could not be started; ``str()`` says why, naming the input."""


class LogSink:
    """One log file, appended to; reopened on SIGHUP; rotated by size when asked.

    Size rotation keeps one old file: ``LOG`` becomes ``LOG.1`` (replacing the previous one).
    """

    def __init__(self, path: str, max_bytes: int | None = None) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.users = 0
        """How many streams (pipes) write here; the file closes when none is left."""
        self.fd = self._open()
        self.size = os.fstat(self.fd).st_size
        self.failed = False

    def _open(self) -> int:
        os.makedirs(os.path.dirname(self.path) or "/", exist_ok=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        return os.open(self.path, flags, 0o640)

    def write(self, data: bytes) -> None:
        """Append ``data`` (rotating first if the file would outgrow ``max_bytes``)."""
        if self.max_bytes is not None and self.size + len(data) > self.max_bytes and self.size:
            with contextlib.suppress(OSError):
                os.replace(self.path, self.path + ".1")
            self.reopen()
        try:
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
            self.size += len(data)
            self.failed = False
        except OSError:
            # A full disk must not stop the supervisor; the output is lost, the service lives on.
            self.failed = True

    def reopen(self) -> None:
        """Close and open the path again: after logrotate moved the file away."""
        try:
            fd = self._open()
        except OSError:
            return  # keep writing to the old file rather than nowhere
        os.close(self.fd)
        self.fd = fd
        self.size = os.fstat(fd).st_size

    def close(self) -> None:
        """Close the file."""
        os.close(self.fd)


def _identity(user: str | None, group: str | None) -> dict[str, object]:
    """Popen keyword arguments for running as user/group, or raise SpawnError naming the input."""
    if user is None and group is None:
        return {}
    kwargs: dict[str, object] = {}
    gid: int | None = None
    if group is not None:
        try:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
        except KeyError:
            raise SpawnError(
                f"unknown group {group!r}: create it or fix the service's group"
            ) from None
    if user is not None:
        try:
            pw = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
        except KeyError:
            if not user.isdigit():
                raise SpawnError(
                    f"unknown user {user!r}: create it or fix the service's user"
                ) from None
            kwargs["user"] = int(user)
            kwargs["extra_groups"] = []
            if gid is None:
                gid = int(user)
        else:
            kwargs["user"] = pw.pw_uid
            if gid is None:
                gid = pw.pw_gid
            # What initgroups(3) does: the user's supplementary groups, plus the primary one.
            kwargs["extra_groups"] = os.getgrouplist(pw.pw_name, gid)
    if gid is not None:
        kwargs["group"] = gid
    if os.geteuid() != 0:
        # Only root may change identity; asking for our own is fine, anything else fails below.
        if kwargs.get("user", os.getuid()) == os.getuid():
            kwargs.pop("user", None)
            kwargs.pop("extra_groups", None)
        if kwargs.get("group", os.getgid()) == os.getgid():
            kwargs.pop("group", None)
    return kwargs


def _pdeathsig(parent: int) -> Callable[[], None]:
    def preexec() -> None:
        # Runs in the child after fork and after setuid (which would clear the setting), before
        # exec. If the supervisor died before this line, the signal will never come: exit now.
        _libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(127)

    return preexec


_SETPRIV_CANDIDATES = ("/usr/bin/setpriv", "/bin/setpriv", "/usr/sbin/setpriv", "/sbin/setpriv")


@functools.cache
def setpriv_prefix() -> tuple[str, ...]:
    """``(setpriv, --pdeathsig, KILL, --)`` where setpriv can set the signal here, else ()."""
    if os.environ.get("NODEROLE_SUPERVISOR_NO_SETPRIV"):
        return ()
    path = next((p for p in _SETPRIV_CANDIDATES if os.access(p, os.X_OK)), None)
    path = path or shutil.which("setpriv")
    if path is None:
        return ()
    prefix = (path, "--pdeathsig", "KILL", "--")
    try:
        done = subprocess.run(
            [*prefix, "/bin/sh", "-c", "exit 0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    return prefix if done.returncode == 0 else ()


def settle(pid: int, *, timeout: float = 0.1) -> None:
    """Wait (bounded) until ``pid`` has gone from setpriv to its own program.

    For a requested start, so that whoever asked sees the command's process (its environment,
    its command line) when the answer comes; respawns do not wait.
    """
    prefix = setpriv_prefix()
    if not prefix:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.readlink(f"/proc/{pid}/exe") != prefix[0]:
                return
        except OSError:
            return  # gone, or exec in progress and then gone: the exit handler deals with it
        time.sleep(0.0005)


def spawn(
    *,
    argv: Sequence[str],
    environment: Mapping[str, str],
    cwd: str,
    user: str | None,
    group: str | None,
    stdout: int,
    stderr: int,
) -> subprocess.Popen[bytes]:
    """Fork and exec the process; raise SpawnError naming what could not be used.

    Must be called from the main thread: PR_SET_PDEATHSIG fires when the parent *thread* exits.
    """
    identity = _identity(user, group)
    prefix = setpriv_prefix()
    extra: dict[str, object] = {}
    if prefix:
        # setpriv would report a missing program only as exit 127 of the child: say it here.
        if not os.access(argv[0], os.X_OK):
            what = "no such file" if not os.path.exists(argv[0]) else "Permission denied"
            raise SpawnError(f"cannot execute {argv[0]}: {what}")
    else:
        extra["preexec_fn"] = _pdeathsig(os.getpid())
    try:
        return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
            [*prefix, *argv],
            env=dict(environment),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            close_fds=True,
            **extra,
            **identity,
        )
    except FileNotFoundError as e:
        if e.filename == cwd:
            raise SpawnError(f"working directory {cwd} does not exist") from None
        raise SpawnError(f"cannot execute {argv[0]}: no such file") from None
    except PermissionError as e:
        raise SpawnError(f"cannot execute {argv[0]}: {e.strerror}") from None
    except OSError as e:
        raise SpawnError(f"cannot execute {argv[0]}: {e.strerror or e}") from None
    except subprocess.SubprocessError as e:
        raise SpawnError(f"cannot start {argv[0]}: {e}") from None
