"""The state file: what the daemon supervises, readable after the daemon is gone.

``run_dir/state.json`` is rewritten atomically (temp file + rename) on every change::

    {"version": 1, "boot_id": "...",
     "supervisor": {"pid": 123, "start_ticks": 456},
     "services": {"NAME": {"state": "running", "pid": 200, "pgid": 200, "start_ticks": 789,
                           "fingerprint": "...", "restarts": 0, "last_exit": null, ...}}}

It never holds a service's environment (secrets stay in memory). Two readers use it: the client,
to answer ``status`` when no daemon runs, and a new daemon, to kill what a SIGKILLed predecessor
left behind (:func:`kill_leftovers`) before it starts anything, so a restart never runs a
duplicate next to an orphan.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from noderole.supervisor import _proc

__all__ = [
    "STATE_VERSION",
    "kill_leftovers",
    "leftover_groups",
    "parse_state",
    "read_state",
    "write_state",
]

STATE_VERSION = 1


def read_state(path: str) -> dict[str, Any]:
    """The state file's content; an empty state when it is missing, unreadable or from another boot.

    Pids recorded in an earlier boot name nothing in this one.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return {"version": STATE_VERSION, "services": {}}
    return parse_state(raw)


def parse_state(raw: bytes) -> dict[str, Any]:
    """The state from the file's bytes (see :func:`read_state`)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return {"version": STATE_VERSION, "services": {}}
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
        return {"version": STATE_VERSION, "services": {}}
    if data.get("boot_id") != _proc.boot_id():
        for record in data.get("services", {}).values():
            record["pid"] = record["pgid"] = record["start_ticks"] = None
        data.pop("supervisor", None)
    data.setdefault("services", {})
    return data


def write_state(path: str, data: dict[str, Any]) -> None:
    """Replace the state file atomically (a reader sees the old or the new file, never half)."""
    data = {**data, "version": STATE_VERSION, "boot_id": _proc.boot_id()}
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    os.replace(tmp, path)


def leftover_groups(data: dict[str, Any]) -> dict[str, tuple[int, list[int]]]:
    """Recorded process groups that still have running members: name -> (pgid, pids).

    A group counts as ours only if its leader is the recorded process (same start ticks) or, the
    leader being dead, its members started no earlier than the leader did. A live process with the
    group's number but another start time means the number was reused: not ours, left alone.
    """
    found: dict[str, tuple[int, list[int]]] = {}
    for name, record in data.get("services", {}).items():
        pgid, ticks = record.get("pgid"), record.get("start_ticks")
        if not isinstance(pgid, int) or not isinstance(ticks, int) or pgid <= 1:
            continue
        leader = _proc.proc_stat(pgid)
        if leader is not None and leader.start_ticks != ticks:
            continue
        members = _proc.group_members(pgid, started_since=ticks)
        if members:
            found[name] = (pgid, members)
    return found


def kill_leftovers(data: dict[str, Any], timeout: float = 5.0) -> dict[str, list[int]]:
    """SIGKILL every recorded group that still runs and wait for it; name -> pids killed.

    Blocking and bounded: called by a daemon before it serves, or by a client with no daemon.
    """
    groups = leftover_groups(data)
    for pgid, _ in groups.values():
        _proc.kill_group(pgid, signal.SIGKILL)
    for name, (pgid, _) in groups.items():
        ticks = data["services"][name]["start_ticks"]
        _proc.wait_group_gone(pgid, timeout, started_since=ticks)
    return {name: pids for name, (_, pids) in groups.items()}
