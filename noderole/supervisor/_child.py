"""Starting one supervised process.

The child gets exactly the spec's environment, its user/group (with the user's supplementary
groups, as ``initgroups`` would), its working directory, stdin from /dev/null, a session and
process group of its own (so a stop reaches its grandchildren). It is started with subprocess's
``vfork`` path (~0.3 ms): no Python code runs in the child. Should the supervisor be SIGKILLed,
its watchdog (:mod:`._watchdog`) ends the children's process groups.

Its output goes to pipes the daemon drains (:mod:`._sinks`).

Standard library only (the daemon imports it).
"""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
from collections.abc import Mapping, Sequence

__all__ = ["SpawnError", "ids", "spawn"]


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
    """Fork and exec the process; raise SpawnError naming what could not be used."""
    identity = _identity(user, group)
    try:
        return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
            list(argv),
            env=dict(environment),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            close_fds=True,
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
