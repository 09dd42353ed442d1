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

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

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
