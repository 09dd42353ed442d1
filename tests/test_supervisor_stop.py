"""A stop's process group: only the service's own is ever signalled, and it is watched cheaply.

A pid, and so the number of the process group its process leads, is free for anyone once the
process is reaped. The tests here drive a :class:`Daemon` in-process (its loop, its units; no
watchdog, no client) so that what it signals, and how often it lists ``/proc``, can be seen.

The reused-number tests run in a private pid namespace (``unshare``), where the next pid can be
chosen (``/proc/sys/kernel/ns_last_pid``): an unrelated program is started on the very pid (and
process group) of a service that has just exited, as a node whose pids wrap within a respawn
delay would see. The namespace's first process is the test's driver; when it ends, the kernel
ends everything in the namespace, and ``--kill-child`` ends the driver should the test die.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from noderole.supervisor import _proc, _unit
from noderole.supervisor._daemon import Daemon
from noderole.supervisor._loop import Timer
from noderole.supervisor._proc import is_alive
from noderole.supervisor._spec import ProcessSpec, SupervisionSpec
from noderole.supervisor._unit import Unit

REPO = Path(__file__).resolve().parent.parent

_DRIVER = r"""
import json, os, subprocess, sys, time
from noderole.supervisor._daemon import Daemon
from noderole.supervisor._proc import proc_stat
from noderole.supervisor._spec import ProcessSpec, SupervisionSpec

scratch, how = sys.argv[1], sys.argv[2]
run_dir = os.path.join(scratch, "run/noderole")
os.makedirs(run_dir)
daemon = Daemon(run_dir)
spec = ProcessSpec(
    name="crash0",
    argv=("/bin/sh", "-c", "exit 3"),
    environment={"PATH": "/usr/bin:/bin"},
    supervision=SupervisionSpec(respawn_delay=60.0, stop_timeout=0.5),
    fingerprint="f1",
)

def run_until(condition, what):
    deadline = time.monotonic() + 15.0
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        daemon.loop.run_once(0.05)
        daemon.flush()

answers = []
daemon.start(spec, False, False, answers.append)
run_until(lambda: answers and daemon.units["crash0"].state == "backoff", "the exit")
unit = daemon.units["crash0"]
dead, dead_ticks = unit.pid, unit.start_ticks
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(dead - 1))
stranger = subprocess.Popen(
    ["/bin/sh", "-c", "trap '' TERM; exec sleep 1000"], start_new_session=True
)
placed = proc_stat(stranger.pid)
result = {"dead": dead, "stranger": stranger.pid, "pgrp": placed.pgrp if placed else None}
done = []
if how == "stop":
    daemon.op_stop({"names": ["crash0"]}, done.append)
elif how == "start":
    daemon.start(spec, False, False, done.append)
else:
    daemon.stop_all(lambda: done.append(True))
run_until(lambda: done, how)
after = proc_stat(stranger.pid)
result["alive"] = after is not None and after.running and after.start_ticks == placed.start_ticks
result["state"] = daemon.units["crash0"].state
stranger.kill()
stranger.wait()
daemon.server.close()
print(json.dumps(result))
"""


def _namespace_problem() -> str | None:
    if os.geteuid() != 0:
        return "a pid namespace with a chosen next pid needs root"
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount", "--mount-proc", "true"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        return f"cannot make a pid namespace here: {probe.stderr.decode(errors='replace')}"
    return None


def _in_namespace(scratch: Path, how: str) -> dict[str, object]:
    """Run the driver as the first process of a private pid namespace; its JSON answer."""
    argv = [
        "unshare",
        "--pid",
        "--fork",
        "--mount",
        "--mount-proc",
        "--kill-child",
        sys.executable,
        "-c",
        _DRIVER,
        str(scratch),
        how,
    ]
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            # unshare ends the namespace's first process (--kill-child), and with it the rest.
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err.decode(errors="replace")
    answer: dict[str, object] = json.loads(out.decode().splitlines()[-1])
    return answer


class TestAReusedGroupNumber:
    @pytest.mark.parametrize("how", ["stop", "start", "stop_all"])
    def test_a_service_waiting_to_respawn_signals_no_stranger(
        self, tmp_path: Path, how: str
    ) -> None:
        """A service that exited and waits out its respawn delay has no process to signal. Its
        group was killed at the exit; the number may now lead an unrelated program's group
        (here one that ignores SIGTERM), which a stop, a start (which ends the old unit first)
        and a stop of everything (SIGTERM to the daemon) must leave alone. Before: that program
        got SIGTERM, then SIGKILL after stop_timeout."""
        problem = _namespace_problem()
        if problem is not None:
            pytest.skip(problem)
        result = _in_namespace(tmp_path, how)
        # The stranger really took the dead service's pid and process group.
        assert result["stranger"] == result["dead"] == result["pgrp"], result
        assert result["alive"], result
        if how != "start":
            assert result["state"] == "stopped", result


class _Stopping:
    """A Daemon driven in-process with one service whose process exits on SIGTERM and leaves a
    member of its group that ignores it; every process it starts is ended by pid at the end."""

    def __init__(self, root: Path, stop_timeout: float) -> None:
        run_dir = root / "run/noderole"
        run_dir.mkdir(parents=True)
        self.kid_file = root / "kid"
        self.daemon = Daemon(str(run_dir))
        self.pids: list[int] = []
        self.scans = 0
        self.pauses: list[float] = []
        script = f"(trap '' TERM; exec sleep 1000) & echo $! > {self.kid_file}; exec sleep 1000"
        self.spec = ProcessSpec(
            name="a",
            argv=("/bin/sh", "-c", script),
            environment={"PATH": "/usr/bin:/bin"},
            supervision=SupervisionSpec(respawn_delay=60.0, stop_timeout=stop_timeout),
            fingerprint="f1",
        )

    def count(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Count the listings of /proc, and note each pause before the next look."""
        listing = _proc.list_sessions
        call_later = self.daemon.loop.call_later

        def counted(
            described: Iterable[int] = (),
        ) -> tuple[dict[int, list[int]], dict[int, list[_proc.ProcStat]]]:
            self.scans += 1
            return listing(described)

        def noted(delay: float, callback: Callable[[], None]) -> Timer:
            self.pauses.append(delay)
            return call_later(delay, callback)

        monkeypatch.setattr(_proc, "list_sessions", counted)
        monkeypatch.setattr(self.daemon.loop, "call_later", noted)

    def run_until(self, condition: Callable[[], object], what: str) -> None:
        deadline = time.monotonic() + 15.0
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.daemon.loop.run_once(0.1)

    def start(self) -> tuple[Unit, int]:
        """The unit, running, and the pid of the member that ignores SIGTERM."""
        answers: list[object] = []
        self.daemon.start(self.spec, False, False, answers.append)
        unit = self.daemon.units["a"]
        assert unit.pid is not None
        self.pids.append(unit.pid)
        self.run_until(lambda: self.kid_file.exists() and self.kid_file.read_text().strip(), "kid")
        kid = int(self.kid_file.read_text())
        self.pids.append(kid)
        # The member has set its trap once it runs sleep (exec keeps the ignored disposition);
        # before, its command line is the shell's, whose script names sleep too.
        self.run_until(lambda: _cmdline(kid).startswith(b"sleep\0"), "the member's trap")
        return unit, kid

    def close(self) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for unit in self.daemon.units.values():
            if unit.popen is not None:
                unit.popen.wait()
        self.daemon.server.close()


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


@pytest.fixture
def stopping(tmp_path: Path) -> Iterator[Callable[[float], _Stopping]]:
    made: list[_Stopping] = []

    def make(stop_timeout: float) -> _Stopping:
        made.append(_Stopping(tmp_path, stop_timeout))
        return made[-1]

    yield make
    for one in made:
        one.close()


class TestALingeringMember:
    def test_the_group_is_looked_at_less_and_less_often(
        self, stopping: Callable[[float], _Stopping], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The leader exits at SIGTERM, a member ignores it until the SIGKILL stop_timeout
        later. Each look at the group lists /proc; the pause between two looks doubles from
        GROUP_POLL up to GROUP_POLL_MAX, so a 2 s stop_timeout costs a handful of listings.
        Before: one every 10 ms, a third of a core on a host of ~700 processes."""
        node = stopping(2.0)
        unit, kid = node.start()
        node.count(monkeypatch)
        stopped: list[bool] = []
        unit.stop(lambda: stopped.append(True))
        node.run_until(lambda: stopped, "the stop")
        assert not is_alive(kid)
        assert (unit.state, unit.reason, unit.last_exit) == ("stopped", "stopped", "signal SIGTERM")
        growing = math.ceil(math.log2(_unit.GROUP_POLL_MAX / _unit.GROUP_POLL))
        bound = growing + math.ceil(2.0 / _unit.GROUP_POLL_MAX) + 4
        assert 2 <= node.scans <= bound, node.pauses
        assert max(node.pauses) == _unit.GROUP_POLL_MAX, node.pauses
        assert node.pauses[: growing + 1] == [
            min(_unit.GROUP_POLL * 2**i, _unit.GROUP_POLL_MAX) for i in range(growing + 1)
        ]

    def test_the_last_members_exit_ends_the_stop_without_a_look_due(
        self, stopping: Callable[[float], _Stopping], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The members left are watched through pidfds: the stop ends when the last one exits,
        not at the next look (here none would come within the hour)."""
        monkeypatch.setattr(_unit, "GROUP_POLL", 3600.0)
        monkeypatch.setattr(_unit, "GROUP_POLL_MAX", 3600.0, raising=False)
        node = stopping(3600.0)
        unit, kid = node.start()
        node.count(monkeypatch)
        stopped: list[bool] = []
        unit.stop(lambda: stopped.append(True))
        node.run_until(lambda: node.scans, "the leader's exit and a look at its group")
        assert not stopped
        assert is_alive(kid)
        os.kill(kid, signal.SIGKILL)
        node.run_until(lambda: stopped, "the stop to end with the member's exit")
        assert (unit.state, unit.reason) == ("stopped", "stopped")
        assert max(node.pauses) >= 3600.0 - 1.0  # no look was due
