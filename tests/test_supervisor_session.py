"""A service's whole session is ended, not only its process group.

Each service's process leads a session and a process group of its own. A child that moves to a
group of its own inside that session (GNU ``timeout`` calls setpgid, a bash with job control puts
each job in a group of its own, perl's ``setpgrp``) was out of reach of a signal to the group: it
survived every stop and every exit, and a crash loop piled up a copy a respawn. Only a process
that calls setsid (a containerd shim) leaves the session, and it must still run on.

Real processes and signals. Every process a test starts carries the harness's marker and is
ended by pid in teardown (the harness fails a test that left one behind); one that a test means
to survive is registered with the harness and killed by the test itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

from noderole.records import Supervision
from noderole.supervisor import ProcessSpec, probes
from noderole.supervisor._proc import is_alive, proc_stat
from noderole.supervisor._record import replace
from tests.supervisor_fixtures import Harness, harness, wait_for

__all__ = ["harness"]

BASH = shutil.which("bash") or "/bin/bash"
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

ESCAPES = {
    # Each starts a process that moves to a process group of its own, in the background: $k.
    "timeout": "timeout 1000 sleep 1000 & k=$!",
    "setpgid": f"{PYTHON} -c 'import os, time; os.setpgid(0, 0); time.sleep(1000)' & k=$!",
    "setpgrp": "perl -e 'setpgrp(0, 0); sleep 1000' & k=$!",
    "job-control": "set -m; sleep 1000 & k=$!",
}
NEEDS = {"timeout": "timeout", "setpgid": None, "setpgrp": "perl", "job-control": None}

MOVED = 'until read -r _ _ _ _ g _ < /proc/$k/stat && [ "$g" = "$k" ]; do sleep 0.01; done'
"""Waits until $k leads a group of its own (field 5 of its stat: none of these names has a
space), so that the service goes on only once the escape has happened."""


def _read_pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _escape(how: str) -> str:
    tool = NEEDS[how]
    if tool is not None and shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    return ESCAPES[how]


def _bash(harness: Harness, name: str, script: str, supervision: Supervision) -> ProcessSpec:
    """The harness's service, run by bash (job control) rather than /bin/sh."""
    spec = harness.spec(name, script, supervision=supervision)
    return replace(spec, argv=(BASH, "-c", script))


def _leads_a_group(pid: int) -> bool:
    st = proc_stat(pid)
    return st is not None and st.pgrp == pid


def _session_of(pid: int) -> int | None:
    st = proc_stat(pid)
    return None if st is None else st.session


@pytest.mark.parametrize("how", list(ESCAPES))
class TestAGroupOfItsOwn:
    def test_the_stop_ends_it(self, harness: Harness, how: str) -> None:
        """stop() returns stopped only once the escapee is gone too. Before: it ran on, nothing
        logged, and status showed no leftovers."""
        kids = harness.root / "kids"
        script = f"{_escape(how)}; echo $k >> {kids}; {MOVED}; exec sleep 1000"
        sup = Supervision(respawn_delay=0.2, stop_timeout=2)
        started = harness.supervisor.start(_bash(harness, "worker", script, sup))
        [kid] = wait_for(lambda: _read_pids(kids), "the escapee")
        assert started.pid is not None
        wait_for(lambda: _leads_a_group(kid), "the escape")
        assert _session_of(kid) == started.pid
        [status] = harness.supervisor.stop(["worker"])
        assert (status.state, status.reason) == ("stopped", "stopped")
        assert not is_alive(kid)
        assert not is_alive(started.pid)
        assert harness.settled_marked([]) == []

    def test_no_copy_piles_up_across_respawns(self, harness: Harness, how: str) -> None:
        """A service that starts an escapee and exits: each exit ends the escapee before the
        respawn, so at most the last one runs. Before: 5 restarts left 7 stray `sleep 1000`,
        and 6 still ran after the stop."""
        kids = harness.root / "kids"
        script = f"{_escape(how)}; echo $k >> {kids}; {MOVED}; exit 1"
        sup = Supervision(respawn_delay=0.2, stop_timeout=2)
        harness.supervisor.start(_bash(harness, "worker", script, sup))
        wait_for(lambda: harness.supervisor.status(["worker"])[0].restarts >= 3, "3 respawns")
        wait_for(lambda: len(_read_pids(kids)) >= 3, "three escapees")
        wait_for(
            lambda: not [k for k in _read_pids(kids)[:-1] if is_alive(k)],
            "every escapee but the last to be gone",
        )
        [status] = harness.supervisor.stop(["worker"])
        assert status.state == "stopped"
        assert [k for k in _read_pids(kids) if is_alive(k)] == []
        assert harness.settled_marked([]) == []

    def test_the_watchdog_of_a_killed_supervisor_ends_it(self, harness: Harness, how: str) -> None:
        """kill -9 of the daemon: its watchdog ends the whole session, escapee included."""
        kids = harness.root / "kids"
        script = f"{_escape(how)}; echo $k >> {kids}; {MOVED}; exec sleep 1000"
        sup = Supervision(respawn_delay=0.2, stop_timeout=2)
        started = harness.supervisor.start(_bash(harness, "worker", script, sup))
        [kid] = wait_for(lambda: _read_pids(kids), "the escapee")
        wait_for(lambda: _leads_a_group(kid), "the escape")
        daemon = harness.supervisor.daemon_pid()
        leader = started.pid
        assert daemon is not None
        assert leader is not None
        os.kill(daemon, signal.SIGKILL)
        wait_for(lambda: not is_alive(leader), "the watchdog to kill the service")
        wait_for(lambda: not is_alive(kid), "the watchdog to kill the escapee")


class TestTheSessionsOtherGroups:
    def test_get_the_stop_signal_first(self, harness: Harness) -> None:
        """The stop signal reaches a group that left, not only the SIGKILL at stop_timeout: the
        escapee's handler runs (here stop_timeout is far beyond any wait of the test)."""
        kids, termed = harness.root / "kids", harness.root / "termed"
        escapee = (
            f"{PYTHON} -c 'import os, signal, time\n"
            "def bye(*_):\n"
            f'    open("{termed}", "w").write("term")\n'
            "    os._exit(0)\n"
            "signal.signal(signal.SIGTERM, bye)\n"
            "os.setpgid(0, 0)\n"
            "time.sleep(1000)' & k=$!"
        )
        script = f"{escapee}; echo $k >> {kids}; {MOVED}; exec sleep 1000"
        sup = Supervision(respawn_delay=0.2, stop_timeout=600)
        harness.supervisor.start(_bash(harness, "worker", script, sup))
        [kid] = wait_for(lambda: _read_pids(kids), "the escapee")
        wait_for(lambda: _leads_a_group(kid), "the escape")
        [status] = harness.supervisor.stop(["worker"])
        assert (status.state, status.last_exit) == ("stopped", "signal SIGTERM")
        assert termed.read_text() == "term"
        assert not is_alive(kid)

    def test_one_that_ignores_it_is_killed_at_stop_timeout(self, harness: Harness) -> None:
        """An escapee that ignores SIGTERM is SIGKILLed at stop_timeout; the stop then ends."""
        kids = harness.root / "kids"
        escapee = (
            f"{PYTHON} -c 'import os, signal, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); os.setpgid(0, 0); time.sleep(1000)' & k=$!"
        )
        script = f"{escapee}; echo $k >> {kids}; {MOVED}; exec sleep 1000"
        sup = Supervision(respawn_delay=0.2, stop_timeout=0.3)
        harness.supervisor.start(_bash(harness, "worker", script, sup))
        [kid] = wait_for(lambda: _read_pids(kids), "the escapee")
        wait_for(lambda: _leads_a_group(kid), "the escape")
        [status] = harness.supervisor.stop(["worker"])
        assert (status.state, status.reason) == ("stopped", "stopped")
        assert not is_alive(kid)

    def test_a_supervisor_started_after_both_were_killed_ends_them(self, harness: Harness) -> None:
        """Daemon and watchdog killed at once: the next daemon's clean-up ends the escapee
        too, and names it among what it killed."""
        kids = harness.root / "kids"
        script = f"{ESCAPES['setpgid']}; echo $k >> {kids}; {MOVED}; exec sleep 1000"
        sup = Supervision(respawn_delay=0.2, stop_timeout=2)
        started = harness.supervisor.start(_bash(harness, "worker", script, sup))
        [kid] = wait_for(lambda: _read_pids(kids), "the escapee")
        wait_for(lambda: _leads_a_group(kid), "the escape")
        [daemon], [watchdog] = harness.daemons(), harness.watchdogs()
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in (daemon, watchdog):
                os.kill(pid, sig)
        wait_for(lambda: not is_alive(daemon) and not is_alive(watchdog), "both to die")
        assert is_alive(kid)
        [status] = harness.supervisor.stop(["worker"])
        assert status.state == "stopped"
        assert started.pid is not None
        assert harness.supervisor.killed_leftovers == {"worker": sorted([started.pid, kid])}
        assert not is_alive(kid)


@pytest.mark.parametrize("how", ["stop", "respawn"])
def test_a_child_that_called_setsid_runs_on(harness: Harness, how: str) -> None:
    """A process that left the session with setsid (as containerd's shims do) is not followed:
    neither a stop nor the exit before a respawn ends it. The test ends it by pid."""
    kids = harness.root / "kids"
    leaver = f"{PYTHON} -c 'import os, time; os.setsid(); time.sleep(1000)' & k=$!"
    left = 'until read -r _ _ _ _ _ s _ < /proc/$k/stat && [ "$s" = "$k" ]; do sleep 0.01; done'
    tail = "exec sleep 1000" if how == "stop" else "exit 1"
    script = f"[ -s {kids} ] || {{ {leaver}; echo $k >> {kids}; {left}; }}; {tail}"
    sup = Supervision(respawn_delay=0.2, stop_timeout=2)
    harness.supervisor.start(harness.spec("worker", script, supervision=sup))
    [kid] = wait_for(lambda: _read_pids(kids), "the process that left the session")
    harness.extra_pids.append(kid)
    try:
        wait_for(lambda: _session_of(kid) == kid, "its setsid")
        if how == "respawn":
            wait_for(lambda: harness.supervisor.status(["worker"])[0].restarts >= 2, "respawns")
            assert is_alive(kid)
        [status] = harness.supervisor.stop(["worker"])
        assert status.state == "stopped"
        assert is_alive(kid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(kid, signal.SIGKILL)
        wait_for(lambda: not is_alive(kid), "the process that left the session to be killed")


def test_a_command_attempt_at_its_deadline_ends_its_whole_session(tmp_path: Path) -> None:
    """A command probe still running at its deadline is killed with every group of its session:
    a `timeout` it ran (a group of its own) does not run on. Ended by pid whatever happens."""
    if shutil.which("timeout") is None:
        pytest.skip("timeout is not installed")
    kids = tmp_path / "kids"
    probe = probes.CommandProbe(
        argv=("/bin/sh", "-c", f"timeout 1000 sleep 1000 & k=$!; echo $k > {kids}; {MOVED}; wait")
    )
    outcome = probes.attempt(probe, left=0.5)
    kid = _read_pids(kids)
    try:
        assert not outcome.done
        assert len(kid) == 1
        wait_for(lambda: not is_alive(kid[0]), "the attempt's timeout to be killed")
    finally:
        for pid in kid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
