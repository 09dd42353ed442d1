"""What /proc says about a process: alive or not, which group and session, and *which* process.

A pid alone names nothing for long: it is reused. Every decision the supervisor takes about a
process it did not just fork (a pidfile, a state file written by a killed supervisor) checks the
start time from ``/proc/PID/stat`` (clock ticks since boot) against the one recorded at spawn.
A zombie is never counted alive (openrc#252): it runs no code and holds no port.

A service's process leads a session of its own, and what it starts stays in that session
whatever process group it moves to (GNU ``timeout`` calls setpgid, a shell with job control puts
each job in a group of its own), until it calls setsid (a containerd shim). The kernel has no call
that lists or signals a session: :func:`list_sessions` lists /proc, and :func:`signal_groups`
signals each group found in it.

Standard library only: the daemon imports this module and must stay small.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import namedtuple

__all__ = [
    "ProcStat",
    "boot_id",
    "describe_status",
    "group_members",
    "is_alive",
    "kill_group",
    "kill_process",
    "list_sessions",
    "proc_stat",
    "session_members",
    "signal_groups",
    "signal_number",
    "wait_exit",
]


TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
if TYPE_CHECKING:
    from collections.abc import Container, Iterable
    from typing import NamedTuple

    class _ProcStatFields(NamedTuple):
        pid: int
        state: str
        ppid: int
        pgrp: int
        session: int
        start_ticks: int

else:
    _ProcStatFields = namedtuple(
        "_ProcStatFields", ["pid", "state", "ppid", "pgrp", "session", "start_ticks"]
    )


class ProcStat(_ProcStatFields):
    """The fields of ``/proc/PID/stat`` the supervisor needs.

    ``state`` is one letter: R, S, D, T, Z (zombie), X (dead)...; ``start_ticks`` is the start
    time in clock ticks after boot: with the pid, it identifies a process for its lifetime.
    """

    __slots__ = ()

    @property
    def running(self) -> bool:
        """True unless the process is a zombie or dead."""
        return self.state not in ("Z", "X", "x")


def proc_stat(pid: int) -> ProcStat | None:
    """Parse ``/proc/PID/stat``; None when there is no such process."""
    # os.open and one os.read, not open(): a crash-looping node reads this for every respawn,
    # and the file object's layers cost more than the read (14 -> 5 us a call). The line is
    # well under a page (the command name is at most 16 bytes).
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    try:
        raw = os.read(fd, 4096)
    except (ProcessLookupError, PermissionError):  # gone between the open and the read
        return None
    finally:
        os.close(fd)
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return ProcStat(
            pid=pid,
            state=fields[0].decode("ascii", "replace"),
            ppid=int(fields[1]),
            pgrp=int(fields[2]),
            session=int(fields[3]),
            start_ticks=int(fields[19]),
        )
    except (IndexError, ValueError):
        return None


def is_alive(pid: int, start_ticks: int | None = None) -> bool:
    """True when PID runs (not a zombie) and, if given, started at ``start_ticks``."""
    st = proc_stat(pid)
    if st is None or not st.running:
        return False
    return start_ticks is None or st.start_ticks == start_ticks


def group_members(pgid: int, *, started_since: int | None = None) -> list[int]:
    """Pids of the running (non-zombie) processes in process group ``pgid``.

    ``started_since``: keep only processes that started at or after these ticks, i.e. that can
    descend from the recorded group leader.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []  # fast path: the kernel knows of no member at all
    except PermissionError:
        pass
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = proc_stat(int(entry))
        if st is None or st.pgrp != pgid or not st.running:
            continue
        if started_since is not None and st.start_ticks < started_since:
            continue
        members.append(st.pid)
    return members


def kill_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to the process group; a group that is already gone is not an error."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def kill_process(pid: int, sig: int) -> None:
    """Send ``sig`` to the process ``pid`` alone; one that is already gone is not an error."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def wait_exit(pid: int, timeout: float | None) -> int | None:
    """Reap our child ``pid``: its exit code (``-N`` for signal N, as Popen gives), waiting up
    to ``timeout`` seconds (None: until it exits); None while it still runs.

    A child reaped already (by an earlier call, or by the kernel when SIGCHLD is ignored,
    inherited across exec) counts as a clean exit, as Popen counts it: nothing is sent to a pid
    the kernel may have given to another process.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.0005
    while True:
        try:
            done, status = os.waitpid(pid, 0 if deadline is None else os.WNOHANG)
        except ChildProcessError:
            return 0
        if done:
            return os.waitstatus_to_exitcode(status)
        assert deadline is not None  # a blocking waitpid returns only with the child
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.05)


def list_sessions(
    described: Iterable[int] = (),
) -> tuple[dict[int, list[int]], dict[int, list[ProcStat]]]:
    """One listing of /proc: every process's pid by its session (sid -> pids), and, for each
    session in ``described``, the running processes in it but its leader (the process whose pid
    is the session's id), as their stat files read during the listing.

    The session comes from getsid(2), one system call a process and no file read: a thousand
    processes take about a millisecond, where reading their stat files took fourteen. A process
    counted running here was running when its file was read (a zombie forks nothing): a session
    that has none, once its leader has exited, never has another, since a process joins a
    session only by being forked inside it.
    """
    getsid = os.getsid
    pids: dict[int, list[int]] = {}
    members: dict[int, list[ProcStat]] = {sid: [] for sid in described}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            sid = getsid(pid)
        except OSError:  # gone since the listing (or hidden by a security module)
            continue
        known = pids.get(sid)
        if known is None:
            pids[sid] = [pid]
        else:
            known.append(pid)
        if pid != sid and sid in members:
            st = proc_stat(pid)
            if st is not None and st.running and st.session == sid:
                members[sid].append(st)
    return pids, members


def session_members(sid: int, *, started_since: int | None = None) -> list[ProcStat]:
    """The running processes of session ``sid`` but its leader, from a listing of /proc.

    ``started_since``: keep only processes that started at or after these ticks, i.e. that can
    descend from the recorded leader.
    """
    found = list_sessions((sid,))[1][sid]
    if started_since is None:
        return found
    return [st for st in found if st.start_ticks >= started_since]


def signal_groups(members: Iterable[ProcStat], sig: int, *, skip: Container[int] = ()) -> set[int]:
    """Send ``sig`` to the process group of each of ``members`` (once a group; not to those in
    ``skip``); returns the groups signalled.

    A group is signalled as a whole (the kernel signals a group at once: a member forking meanwhile
    cannot leave a child out), and only after one of its listed members, read again just before,
    is still the same process (same start time), in the same group and session: the number of a
    group whose members have all exited may be another program's by then. A member that fails the
    check leaves its group to the next member listed in it.
    """
    done: set[int] = set()
    for st in members:
        if st.pgrp in done or st.pgrp in skip or st.pgrp <= 1:
            continue
        now = proc_stat(st.pid)
        if (
            now is None
            or not now.running
            or (now.start_ticks, now.pgrp, now.session) != (st.start_ticks, st.pgrp, st.session)
        ):
            continue
        done.add(st.pgrp)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(st.pgrp, sig)
    return done


def boot_id() -> str:
    """This boot's random id: recorded pids mean nothing after a reboot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def signal_number(name: str) -> int:
    """``"SIGTERM"`` -> 15; raises ValueError naming the input otherwise."""
    import signal  # here: signal builds three enums at import, which `status` never needs

    try:
        return int(signal.Signals[name])
    except KeyError:
        raise ValueError(f"unknown signal name {name!r} (use a name such as SIGTERM)") from None


def describe_status(returncode: int) -> str:
    """Popen returncode -> ``"exit 3"`` or ``"signal SIGKILL"``."""
    if returncode < 0:
        import signal

        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit {returncode}"
