"""The native supervisor and the limit of open files: its own raised, the one it was given for
every service, and a clear refusal at the hard limit.

A daemon holds a pidfd, a pipe and a log file for each logged service: at the usual soft limit
of 1,024, some 340 services. Here the daemon is started, as ``noderole apply`` starts it, by a
process whose limit the test sets (a small one, so that a few dozen services reach it); then the
test's own client drives it. Real daemons, real processes, real ``/proc/PID/limits``.
"""

from __future__ import annotations

import functools
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from noderole.records import Supervision
from noderole.supervisor import Supervisor, _fdlimit
from tests.harness.capabilities import CAP_SYS_RESOURCE, capable
from tests.supervisor_fixtures import Harness, harness, wait_for

__all__ = ["harness"]  # the fixture, imported for pytest

LOGGED = 30
"""Services with a log each: 90 descriptors and more, past a soft limit of 64."""


def _launch_daemon(run_dir: Path, limits: tuple[int, int], *, unprivileged: bool = False) -> None:
    """Start ``run_dir``'s daemon from a process whose limit of open files is ``limits``;
    ``unprivileged``: without CAP_SYS_RESOURCE (as in an unprivileged container), which it
    would need to raise a hard limit."""
    code = (
        "import sys; from noderole.supervisor import Supervisor; "
        "Supervisor(sys.argv[1]).ensure_running()"
    )
    drop = ["setpriv", "--bounding-set=-sys_resource", "--inh-caps=-sys_resource"]
    subprocess.run(
        [*(drop if unprivileged else []), sys.executable, "-c", code, str(run_dir)],
        check=True,
        timeout=60,
        preexec_fn=functools.partial(resource.setrlimit, resource.RLIMIT_NOFILE, limits),
    )


def _open_files_limit(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits") as f:
        line = next(line for line in f if line.startswith("Max open files"))
    soft, hard = re.findall(r"\d+", line)[:2]
    return int(soft), int(hard)


def _start_logged(harness: Harness, count: int, *, name: str | None = None) -> dict[str, str]:
    """Start ``count`` services (``s0``, ``s1``... or ``name``), each with its own log; their
    state (and reason if failed)."""
    states = {}
    for i in range(count):
        called = name or f"s{i}"
        spec = harness.spec(
            called,
            "exec sleep 1000",
            stdout_log=str(harness.root / f"var/log/{called}.log"),
        )
        status = harness.supervisor.start(spec)
        states[status.name] = status.state + (f": {status.reason}" if status.reason else "")
    return states


class TestRaisedForItself:
    def test_services_past_the_soft_limit_all_start(self, harness: Harness) -> None:
        """Given 64 (hard 4,096), 30 logged services all run: the daemon raised its own soft
        limit to the hard one. Before, the 20th or so failed with EMFILE, and with it the
        daemon's state writes and control connections."""
        _launch_daemon(harness.run_dir, (64, 4096))
        states = _start_logged(harness, LOGGED)
        assert set(states.values()) == {"running"}, states
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        assert _open_files_limit(daemon) == (4096, 4096)
        kept = [int(fd) for fd in os.listdir(f"/proc/{daemon}/fd")]
        assert len(kept) > 64  # the point: more than the limit it was given
        # Every status and every stop still answered.
        assert {s.state for s in harness.supervisor.status()} == {"running"}
        stopped = harness.supervisor.stop([f"s{i}" for i in range(LOGGED)])
        assert {s.state for s in stopped} == {"stopped"}

    @pytest.mark.parametrize("cwd", ["daemon's", "another"])
    def test_each_service_gets_the_limit_the_daemon_was_given(
        self, harness: Harness, tmp_path: Path, cwd: str
    ) -> None:
        """A service sees 64/4,096, as under OpenRC or systemd, whether started with posix_spawn
        (the daemon's working directory) or Popen (another), from its first instruction."""
        _launch_daemon(harness.run_dir, (64, 4096))
        other = tmp_path / "elsewhere"
        other.mkdir()
        # The shell reads its limits before anything could change them after the exec.
        out = tmp_path / "limits"
        script = (
            f"echo $(ulimit -Sn) $(ulimit -Hn) > {out}.tmp; mv {out}.tmp {out}; exec sleep 1000"
        )
        spec = harness.spec("reader", script)
        if cwd == "another":
            spec = harness.spec("reader", script, cwd=str(other))
        status = harness.supervisor.start(spec)
        assert status.state == "running", status
        assert status.pid is not None
        seen = wait_for(lambda: out.exists() and out.read_text().split(), "the limits")
        assert seen == ["64", "4096"]
        assert _open_files_limit(status.pid) == (64, 4096)
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        assert _open_files_limit(daemon) == (4096, 4096)  # lowered only around the spawn


def _daemons_limit(harness: Harness) -> tuple[int, int]:
    daemon = harness.supervisor.daemon_pid()
    assert daemon is not None
    return _open_files_limit(daemon)


def _start_reader(harness: Harness, out: Path, open_files: int) -> int:
    """Start a service that asks for ``open_files`` and writes the limits it sees; its pid."""
    script = f"echo $(ulimit -Sn) $(ulimit -Hn) > {out}.tmp; mv {out}.tmp {out}; exec sleep 1000"
    sup = Supervision(respawn_delay=0.05, stop_timeout=2, open_files=open_files)
    status = harness.supervisor.start(harness.spec("reader", script, supervision=sup))
    assert status.state == "running", status
    assert status.pid is not None
    return status.pid


class TestAServicesOwnLimit:
    def test_a_service_gets_the_limit_it_asks_for(self, harness: Harness, tmp_path: Path) -> None:
        """Supervision(open_files=N): the service starts with a soft limit of N under the
        hard limit the daemon has (as systemd's LimitNOFILE= and OpenRC's rc_ulimit give it);
        the daemon's own is as it was."""
        _launch_daemon(harness.run_dir, (64, 4096))
        out = tmp_path / "limits"
        pid = _start_reader(harness, out, 1000)
        assert wait_for(lambda: out.exists() and out.read_text().split(), "the limits") == [
            "1000",
            "4096",
        ]
        assert _open_files_limit(pid) == (1000, 4096)
        assert _daemons_limit(harness) == (4096, 4096)  # as it was

    def test_a_limit_above_the_hard_one_unprivileged_is_the_highest_it_can_give(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        """Above the daemon's hard limit, which it may not raise without CAP_SYS_RESOURCE (k3s
        asks for 1,048,576; an unprivileged container gives less): the service starts with the
        hard limit, as systemd gives the closest limit it may, and the log says so. The
        daemon's limits are as they were."""
        _launch_daemon(harness.run_dir, (64, 4096), unprivileged=True)
        out = tmp_path / "limits"
        pid = _start_reader(harness, out, 8192)
        assert _open_files_limit(pid) == (4096, 4096)
        log = harness.supervisor.log_path.read_text()
        assert (
            "reader: started with a limit of 4096 open files, not the 8192 it asks for: that "
            "is above the supervisor's hard limit (4096), which only a supervisor with "
            "CAP_SYS_RESOURCE may raise"
        ) in log
        assert _daemons_limit(harness) == (4096, 4096)  # as it was

    def test_a_limit_past_the_kernels_ceiling_names_it(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        """No process may have more than fs.nr_open files, privileged or not: the service
        starts with the daemon's hard limit, and the log names the kernel's ceiling rather
        than a capability the daemon may well have."""
        ceiling = int(Path("/proc/sys/fs/nr_open").read_text())
        _launch_daemon(harness.run_dir, (64, 4096))
        pid = _start_reader(harness, tmp_path / "limits", ceiling + 1)
        assert _open_files_limit(pid) == (4096, 4096)
        log = harness.supervisor.log_path.read_text()
        assert (
            f"reader: started with a limit of 4096 open files, not the {ceiling + 1} it asks "
            f"for: the kernel allows no process more than fs.nr_open ({ceiling})"
        ) in log

    def test_a_privileged_supervisor_raises_the_hard_limit_for_it(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        """With CAP_SYS_RESOURCE (a node's root), a limit above the daemon's hard one is given
        whole, soft and hard, and the daemon's own hard limit is back where it was after the
        start. (A machine whose root lacks it, as a sandboxed CI runner's may, gives the hard
        limit, as above.)"""
        _launch_daemon(harness.run_dir, (64, 4096))
        pid = _start_reader(harness, tmp_path / "limits", 8192)
        given = 8192 if capable(CAP_SYS_RESOURCE) else 4096
        assert _open_files_limit(pid) == (given, given)
        assert _daemons_limit(harness) == (4096, 4096)  # as it was


class TestAtTheHardLimit:
    def test_a_start_fails_naming_the_limit_and_the_daemon_still_answers(
        self, harness: Harness
    ) -> None:
        """Given 64 with no room above it, the services that fit run, the rest fail saying
        which limit to raise, and the daemon still writes its state and answers status and
        stop. Before: `[Errno 24] Too many open files: '/dev/null'`, a lost state file
        write, and connections refused."""
        _launch_daemon(harness.run_dir, (64, 64))
        states = _start_logged(harness, LOGGED)
        running = [name for name, state in states.items() if state == "running"]
        failed = {name: state for name, state in states.items() if state != "running"}
        assert running, states
        assert failed, states
        for state in failed.values():
            assert state.startswith("crashed: cannot start: too many open files"), state
            assert "hard limit of open files (RLIMIT_NOFILE) is 64" in state
            assert "ulimit -Hn" in state
        # Still answering, and its state file is whole and current.
        statuses = {s.name: s.state for s in harness.supervisor.status()}
        assert statuses == {name: state.split(":")[0] for name, state in states.items()}
        recorded = Supervisor(harness.run_dir).state_path.read_text()
        assert all(f'"{name}"' in recorded for name in states)
        # Room again once some stop (the daemon stays while one service is left): a service
        # that failed starts now.
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        stopped = harness.supervisor.stop(running[1:])
        assert {s.state for s in stopped} == {"stopped"}
        wait_for(
            lambda: len(os.listdir(f"/proc/{daemon}/fd")) < 30,
            "the stopped services' pipes and logs to be closed",
        )
        again = _start_logged(harness, 1, name=next(iter(failed)))
        assert list(again.values()) == ["running"], again
        assert harness.supervisor.daemon_pid() == daemon

    def test_a_process_started_without_room_for_its_pidfd_is_ended(self, harness: Harness) -> None:
        """Services without a log keep only a pidfd, taken once the process runs: past the
        limit that process is killed (its exit would go unseen), the start fails naming the
        limit, and no process is left but those of the services that run."""
        _launch_daemon(harness.run_dir, (64, 64))
        states = {}
        for i in range(60):
            status = harness.supervisor.start(harness.spec(f"s{i}", "exec sleep 1000"))
            states[status.name] = status.state + (f": {status.reason}" if status.reason else "")
        running = [name for name, state in states.items() if state == "running"]
        failed = [state for state in states.values() if state != "running"]
        assert running, states
        assert failed, states
        assert all("(RLIMIT_NOFILE) is 64" in state for state in failed), failed
        pids = sorted(s.pid for s in harness.supervisor.status() if s.pid is not None)
        assert len(pids) == len(running)
        assert harness.settled_marked(pids) == pids


class TestKeep:
    def test_a_kept_descriptor_moves_above_the_low_numbers(self, tmp_path: Path) -> None:
        r, w = os.pipe()
        kept = _fdlimit.keep(r)
        try:
            assert kept >= _fdlimit.low()
            assert os.get_inheritable(kept) is False
            with pytest.raises(OSError, match="Bad file descriptor"):
                os.fstat(r)  # the original is closed
            os.write(w, b"x")
            assert os.read(kept, 1) == b"x"
        finally:
            os.close(kept)
            os.close(w)
