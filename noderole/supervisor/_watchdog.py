"""The watchdog: a SIGKILLed supervisor's services must not run on unsupervised.

The daemon starts one watchdog, in a session of its own, as soon as it serves. The watchdog does
nothing but wait on a pidfd of the daemon. When the daemon is gone it reads the state file and
SIGKILLs every process group the daemon recorded that still runs, verified by start time
(:func:`noderole.supervisor._state.kill_leftovers`), grandchildren included. After a clean exit
the daemon has stopped everything itself, so there is nothing left to kill.

Why not ``PR_SET_PDEATHSIG`` on each child: it must be set in the child between fork and exec,
which costs a full ``fork`` of the ~10 MB daemon and Python code in the child (~2.9 ms a start,
measured), or an extra ``setpriv`` exec (~1.1 ms); and it reaches only the direct child, never
its grandchildren. The watchdog costs one small process for the node and nothing per start.

Standard library only, and as little of it as possible until the daemon is gone: the watchdog
lives as long as the node, so its memory is the node's (~8.6 MB, a bare interpreter).
"""

from __future__ import annotations

import os
import select
import sys

__all__ = ["STATE_NAME", "main"]

STATE_NAME = "state.json"
"""``_protocol.STATE_NAME``, repeated: importing _protocol (json, typing) would cost the watchdog
memory for the node's whole life."""


def _log(message: str) -> None:
    import time

    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    sys.stderr.write(f"{stamp} noderole-supervisor watchdog[{os.getpid()}]: {message}\n")
    sys.stderr.flush()


def _start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19]) if fields[0] not in (b"Z", b"X") else None


class _StateCopy:
    """The last readable copy of the state file, refreshed when the file changes.

    Read again each second while the daemon lives (a ``stat``; the file is read only when it
    changed), so that what the daemon last recorded is known even if the file is gone or broken
    by the time the daemon dies.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.raw = b""
        self._seen: tuple[int, int] | None = None

    def refresh(self) -> None:
        try:
            st = os.stat(self.path)
            seen = (st.st_mtime_ns, st.st_size)
            if seen != self._seen:
                with open(self.path, "rb") as f:
                    raw = f.read()
                if raw:
                    self.raw, self._seen = raw, seen
        except OSError:
            pass


def wait_for_exit(pid: int, start_ticks: int, state: _StateCopy | None = None) -> None:
    """Block until process ``pid`` (started at ``start_ticks``) has exited."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return  # already gone
    try:
        # Checked after opening the pidfd: a pid reused by another process is not waited for.
        if _start_ticks(pid) != start_ticks:
            return
        while not select.select([fd], [], [], 1.0)[0]:
            if state is not None:
                state.refresh()
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    """``_watchdog RUN_DIR DAEMON_PID DAEMON_START_TICKS``."""
    run_dir, daemon_pid, daemon_ticks = argv[0], int(argv[1]), int(argv[2])
    state = _StateCopy(os.path.join(run_dir, STATE_NAME))
    state.refresh()
    wait_for_exit(daemon_pid, daemon_ticks, state)
    from noderole.supervisor import _state

    state.refresh()  # the daemon's last word, if the file is still there
    data = _state.parse_state(state.raw)
    recorded = (data.get("supervisor") or {}).get("pid")
    if recorded not in (None, daemon_pid):
        return 0  # a newer daemon already took over (and recovered what was left)
    killed = _state.kill_leftovers(data)
    for name, pids in sorted(killed.items()):
        _log(f"supervisor {daemon_pid} died; killed {name}: {' '.join(map(str, pids))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
