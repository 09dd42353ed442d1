"""Starting one supervised process.

The child gets exactly the spec's environment, its user/group (with the user's supplementary
groups, as ``initgroups`` would), its working directory, stdin from /dev/null, a session and
process group of its own (so a stop reaches its grandchildren). No Python code runs in the child.
A process that keeps the supervisor's identity and working directory (every service that names
no user or group and keeps the default working directory, the node's ``/``, where the daemon
runs) is started with :func:`os.posix_spawn`; the others through :class:`subprocess.Popen`,
which can change both. Both give the child the same: no descriptor but 0, 1 and 2 (every
descriptor the daemon opens is close-on-exec, as Python makes them; a test lists the child's),
SIGPIPE and SIGXFSZ back to their defaults (Python ignores SIGPIPE), the limit of open files the
daemon was given (:mod:`._fdlimit`), and the same error for a program that cannot run.
posix_spawn costs the daemon about half the CPU of a Popen (45 against 100 us a start here),
which a crash-looping node pays at every respawn. Should the supervisor be SIGKILLed, its
watchdog (:mod:`._watchdog`) ends the children's process groups.

Its output goes to pipes the daemon drains (:mod:`._sinks`).

Standard library only (the daemon imports it).
"""

from __future__ import annotations

import grp
import os
import pwd
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence

from noderole.supervisor import _fdlimit, _proc, _safeopen

__all__ = ["Child", "SpawnError", "become", "enter_directory", "ids", "spawn"]

_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)
"""What ``Popen(restore_signals=True)`` resets in the child: Python ignores both."""


class SpawnError(Exception):
    """The process could not be started; ``str()`` says why, naming the input."""


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


def ids(user: str | None, group: str | None) -> tuple[int | None, int | None]:
    """The uid and gid the process will run as (None: ours); SpawnError for an unknown name.

    Its log files are opened with these rights where its user could plant links (_safeopen).
    """
    identity = _identity(user, group)
    uid, gid = identity.get("user"), identity.get("group")
    return (uid if isinstance(uid, int) else None, gid if isinstance(gid, int) else None)


def become(
    *,
    stdout_log: str | None,
    stderr_log: str | None,
    user: str | None,
    group: str | None,
    warn: Callable[[str], None],
) -> None:
    """Make this process what the supervisor makes a child it starts, before an ``exec``: its
    logs on descriptors 1 and 2, opened as the supervisor opens them (:mod:`._safeopen`: no link
    or hard link a user planted is followed, and in a directory others can write, the file is
    opened with the service's rights), then the service's user and group (with the user's
    supplementary groups, as ``initgroups`` would). ``noderole exec`` under systemd, where
    ``StandardOutput=append:`` would have systemd, as root, append to whatever a planted link
    names. A log that cannot be opened is reported to ``warn`` and the stream stays as it was
    (the journal), as the supervisor runs a service without it. SpawnError for an unknown user
    or group, or an identity this process may not take."""
    from noderole.supervisor import _safeopen

    identity = _identity(user, group)
    extra, group_id, user_id = (identity.get(k) for k in ("extra_groups", "group", "user"))
    uid = user_id if isinstance(user_id, int) else None
    gid = group_id if isinstance(group_id, int) else None
    opened: dict[str, int] = {}
    for number, path in ((1, stdout_log), (2, stderr_log)):
        if not path:
            continue
        if path not in opened:
            try:
                opened[path] = _safeopen.open_append(path, uid=uid, gid=gid)
            except OSError as e:
                warn(f"cannot open the log {path}: {e}; this stream goes to the journal")
                continue
        os.dup2(opened[path], number)
    for fd in opened.values():
        os.close(fd)
    try:
        if isinstance(extra, list):
            os.setgroups(extra)
        if gid is not None:
            os.setgid(gid)
        if uid is not None:
            os.setuid(uid)
    except OSError as e:
        raise SpawnError(f"cannot run as {user or group}: {e.strerror or e}") from None


class Child:
    """A process started with :func:`os.posix_spawn`: what the supervisor uses of a Popen."""

    __slots__ = ("pid", "returncode")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code (``-N`` for signal N), reaping the process; None while it runs."""
        if self.returncode is None:
            self.returncode = _proc.wait_exit(self.pid, 0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code once the process has exited; TimeoutExpired after ``timeout`` s."""
        if self.returncode is None:
            self.returncode = _proc.wait_exit(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
        return self.returncode


_devnull = -1


def _stdin() -> int:
    global _devnull
    if _devnull < 0:
        _devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    return _devnull


def spawn(
    *,
    argv: Sequence[str],
    environment: Mapping[str, str],
    cwd: str,
    user: str | None,
    group: str | None,
    stdout: int,
    stderr: int,
    open_files: int | None = None,
    name: str = "",
) -> Child | subprocess.Popen[bytes]:
    """Fork and exec the process; raise SpawnError naming what could not be used.

    ``open_files``: its limit of open files (None: the one the daemon was given); one the daemon
    may not give is lowered to the highest it can, and the log says so, naming ``name``.
    """
    identity = _identity(user, group)
    try:
        with _fdlimit.for_child(open_files) as limit:
            child = _spawn(argv, environment, cwd, identity, stdout, stderr)
    except FileNotFoundError as e:
        if e.filename == cwd:
            raise SpawnError(f"working directory {cwd} does not exist") from None
        raise SpawnError(f"cannot execute {argv[0]}: {_why_not(argv[0], e)}") from None
    except OSError as e:
        from noderole.supervisor import _proclimit

        if _proclimit.is_exhausted(e):  # the fork, not the program: it was never run
            raise SpawnError(f"cannot start {argv[0]}: {_proclimit.explain(e)}") from None
        raise SpawnError(f"cannot execute {argv[0]}: {_why_not(argv[0], e)}") from None
    except subprocess.SubprocessError as e:
        raise SpawnError(f"cannot start {argv[0]}: {e}") from None
    if open_files is not None and limit is not None and limit[0] < open_files:
        # Here: `noderole exec`, on the boot path, imports this module for become() alone.
        from noderole.supervisor._log import log_limited

        log_limited(
            f"{name} open files",
            f"{name}: started with a limit of {limit[0]} open files, not the {open_files} it "
            f"asks for: {_fdlimit.why_not_raised(open_files, limit[1])}",
        )
    return child


def _why_not(program: str, error: OSError) -> str:
    from noderole.supervisor._execerror import why_not  # only once an exec failed

    return why_not(program, error)


def _spawn(
    argv: Sequence[str],
    environment: Mapping[str, str],
    cwd: str,
    identity: dict[str, object],
    stdout: int,
    stderr: int,
) -> Child | subprocess.Popen[bytes]:
    """posix_spawn where it can start the process, else Popen (see the module's text)."""
    if not identity and _is_current_directory(cwd):
        pid = os.posix_spawn(
            argv[0],
            list(argv),
            dict(environment),
            file_actions=[
                (os.POSIX_SPAWN_DUP2, _stdin(), 0),
                (os.POSIX_SPAWN_DUP2, stdout, 1),
                (os.POSIX_SPAWN_DUP2, stderr, 2),
            ],
            setsid=True,
            setsigdef=_DEFAULT_SIGNALS,
        )
        return Child(pid)
    # The child changes directory before it takes the service's identity (Popen's order): the
    # directory is reached as the supervisor reaches logs, never through a link planted in a
    # directory other users can write (its user could send his service into a directory of
    # root's he may not enter), and entered through the descriptor, so nothing is swapped in
    # between. The descriptor is closed in the child before the exec (close_fds).
    directory = _working_directory(cwd)
    try:
        return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
            list(argv),
            env=dict(environment),
            cwd=f"/proc/self/fd/{directory}" if directory >= 0 else cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            close_fds=True,
            **identity,
        )
    finally:
        if directory >= 0:
            os.close(directory)


def _working_directory(cwd: str) -> int:
    """A descriptor of the absolute directory ``cwd`` (-1 for a relative one), reached without
    a link planted where others can write; SpawnError naming it when it cannot be."""
    if not os.path.isabs(cwd):
        return -1
    try:
        return _safeopen.open_dir(cwd)
    except FileNotFoundError:
        raise SpawnError(f"working directory {cwd} does not exist") from None
    except OSError as e:
        raise SpawnError(f"working directory {cwd}: {e.strerror or e}") from None


def enter_directory(cwd: str) -> None:
    """Make ``cwd`` this process's working directory as the supervisor makes it a child's,
    before an ``exec``: reached without a link planted where others can write
    (:func:`_working_directory`), with this process's rights (``noderole exec`` calls it before
    it takes the service's user, or already as that user), and entered through its descriptor.
    ``noderole exec`` under OpenRC and systemd, whose ``directory=`` and ``WorkingDirectory=``
    (with ``ExecStart=+``) are entered as root, through whatever link is there, before the
    user is taken. SpawnError naming the directory when it cannot be entered."""
    directory = _working_directory(cwd)
    try:
        if directory >= 0:
            os.fchdir(directory)
        else:  # relative (a Service's is absolute): as Popen's cwd for the supervisor's child
            os.chdir(cwd)
    except OSError as e:
        raise SpawnError(f"working directory {cwd}: {e.strerror or e}") from None
    finally:
        if directory >= 0:
            os.close(directory)


def _is_current_directory(cwd: str) -> bool:
    """True when ``cwd`` is the directory the supervisor runs in (the daemon's: the node root,
    ``/`` on a real node), spelled as :func:`os.getcwd` spells it."""
    try:
        return os.path.normpath(cwd) == os.getcwd()
    except OSError:  # our own directory was removed: let Popen change to cwd
        return False
