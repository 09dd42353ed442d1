"""A node whose limit on processes is reached (a container's pids.max): clear words, no traceback.

Real cgroups of the pids controller (tests/harness/pids.py), real forks refused by the kernel,
the real ``noderole`` command and supervisor. Past the limit, ``fork`` fails with ``EAGAIN``
("Resource temporarily unavailable") and ``Thread.start`` with "can't start new thread"; before,
an apply printed a traceback, a service "could not start: BlockingIOError", and the supervisor
a traceback in its log, none naming the limit.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from noderole.cli._app import App
from noderole.rehearsal import stage_rehearsal
from noderole.root import NodeRoot
from noderole.supervisor import ReadinessSpec, Supervisor, _proclimit
from noderole.supervisor.probes import TcpProbe
from noderole.testing import end_node_processes, eventually
from tests.harness.pids import PidsCgroup, pids_problem
from tests.supervisor_fixtures import Harness, harness

__all__ = ["harness"]  # the fixture, imported for pytest

NODEROLE = str(Path(sys.executable).parent / "noderole")
DISABLED = ("--disable-plugin", "node-exporter")

needs_pids = pytest.mark.skipif(pids_problem() is not None, reason=pids_problem() or "")


class TestWords:
    def test_the_failures_it_explains(self) -> None:
        assert _proclimit.is_exhausted(OSError(errno.EAGAIN, "Resource temporarily unavailable"))
        assert _proclimit.is_exhausted(RuntimeError("can't start new thread"))
        assert not _proclimit.is_exhausted(OSError(errno.ENOENT, "No such file or directory"))
        assert not _proclimit.is_exhausted(RuntimeError("something else"))

    def test_without_a_full_cgroup_every_candidate_is_named(self) -> None:
        """Here nothing is at its limit: the words name where to look, and what to do."""
        words = _proclimit.explain(OSError(errno.EAGAIN, "Resource temporarily unavailable"))
        assert words.startswith("Resource temporarily unavailable: the limit on processes")
        assert "pids.max" in words
        assert "kernel.threads-max" in words
        assert words.endswith(_proclimit.FIX)

    @needs_pids
    def test_a_refused_fork_names_the_full_cgroup(self) -> None:
        """A fork refused at pids.max 1: the cgroup, its limit and its count are named."""
        probe = (
            "from noderole.supervisor import _proclimit\n"
            "import os\n"
            "try:\n"
            "    os.fork()\n"
            "except OSError as e:\n"
            "    print(_proclimit.is_exhausted(e), _proclimit.explain(e))\n"
        )
        with PidsCgroup(1) as cgroup:
            done = cgroup.run([sys.executable, "-c", probe], timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("True Resource temporarily unavailable: the limit on")
        assert f"(pids.max of cgroup {cgroup.name} is 1, 1 in use)" in done.stdout


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The server role's stand-ins and inputs under a scratch root (as a rehearsal stages)."""
    root = tmp_path_factory.mktemp("pids-node")
    app = App(root=NodeRoot(root), disabled_plugins=("node-exporter",))
    stage_rehearsal(app.root, app.plugins, app.node)
    try:
        yield root
    finally:
        end_node_processes(root)


def _apply_within(root: Path, limit: int) -> tuple[int, str]:
    """``noderole apply server`` in a fresh cgroup of ``limit`` tasks, from nothing running;
    everything it started is ended after."""
    env = dict(os.environ)
    try:
        with PidsCgroup(limit) as cgroup:
            done = cgroup.run(
                [NODEROLE, "--root", str(root), *DISABLED, "apply", "server"], env=env, timeout=120
            )
    finally:
        Supervisor(root / "run/noderole", timeout=30).shutdown()
        end_node_processes(root)
    return done.returncode, done.stdout + done.stderr


@needs_pids
class TestApplyAtTheLimit:
    def test_no_thread_for_plugin_code_is_one_paragraph(self, staged: Path) -> None:
        """At pids.max 1 not even the thread that bounds a plugin's import can start."""
        code, output = _apply_within(staged, 1)
        assert code == 1, output
        assert "Traceback" not in output
        assert output.startswith("noderole: error: cannot start a thread to run import ")
        assert "can't start new thread: the limit on processes and threads was reached" in output
        assert "pids.max of cgroup /noderole-test-" in output
        assert output.rstrip().endswith(_proclimit.FIX)

    def test_every_limit_is_named_never_a_traceback(self, staged: Path) -> None:
        """From 1 task to enough: each apply that fails names pids.max; none shows a traceback,
        a bare exception name, or the supervisor's traceback; with room enough, all start."""
        outcomes: dict[int, int] = {}
        for limit in range(1, 11):
            code, output = _apply_within(staged, limit)
            outcomes[limit] = code
            assert "Traceback" not in output, (limit, output)
            assert "BlockingIOError" not in output, (limit, output)
            assert "RuntimeError" not in output, (limit, output)
            if code != 0:
                assert code == 1, (limit, output)
                assert "pids.max of cgroup /noderole-test-" in output, (limit, output)
                assert "cannot execute" not in output, (limit, output)  # it was never run
        assert outcomes[10] == 0, outcomes
        assert outcomes[1] == 1, outcomes


@needs_pids
class TestSupervisorAtTheLimit:
    def test_a_refused_watchdog_is_forked_again_once_there_is_room(self, harness: Harness) -> None:
        """The watchdog dies while the cgroup is full: the daemon says why, once, keeps its
        service, and forks a new watchdog as soon as the limit allows."""
        status = harness.supervisor.start(harness.spec("a", "exec sleep 600"))
        assert status.pid is not None
        daemon = harness.supervisor.daemon_pid()
        [watchdog] = eventually(harness.watchdogs, "the watchdog")
        assert daemon is not None
        with PidsCgroup("max") as cgroup:
            for pid in (daemon, watchdog, status.pid):
                cgroup.add(pid)
            # No room for another watchdog (the daemon and its service fill it), set before the
            # kill: the daemon forks the next one the moment it hears of the death.
            cgroup.set_limit(1)
            os.kill(watchdog, signal.SIGKILL)
            log = harness.supervisor.log_path
            words: str = eventually(
                lambda: _text(log) if "cannot start another watchdog" in _text(log) else "",
                "the refusal in the log",
            )
            assert re.search(rf"pids\.max of cgroup {cgroup.name} is 1, \d+ in use", words)
            assert "internal error" not in words
            [running] = harness.supervisor.status(["a"])
            assert running.pid == status.pid
            cgroup.set_limit(cgroup.current() + 1)
            [replacement] = eventually(
                lambda: [w for w in harness.watchdogs() if w != watchdog], "a new watchdog"
            )
            # Logged once the fork has returned: a moment after ps can see the new watchdog.
            eventually(lambda: "another watchdog started after" in _text(log), "the log line")
            assert _text(log).count("cannot start another watchdog") == 1
            assert replacement in cgroup.pids()


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


@needs_pids
class TestChecksAtTheLimit:
    def test_a_readiness_check_without_a_thread_says_so(self, harness: Harness) -> None:
        """The daemon starts a service in the last free slot: its check (a thread) cannot
        start; the service runs on, not ready, the reason naming the limit (before: a
        traceback in the log at every tick, and no reason)."""
        first = harness.supervisor.start(harness.spec("a", "exec sleep 600"))
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        assert first.pid is not None
        with socket.socket() as listener, PidsCgroup("max") as cgroup:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            for pid in (daemon, *harness.watchdogs(), first.pid):
                cgroup.add(pid)
            cgroup.set_limit(cgroup.current() + 1)  # room for the service, none for its check
            check = ReadinessSpec(
                probe=TcpProbe(host="127.0.0.1", port=listener.getsockname()[1]), timeout=1
            )
            status = harness.supervisor.start(
                harness.spec("b", "exec sleep 600", readiness=check), wait_ready=True
            )
            assert status.state == "running"
            assert status.reason.startswith(
                "not ready after 1s: no thread for the check: can't start new thread: the limit "
            )
            assert f"pids.max of cgroup {cgroup.name} is" in status.reason
            assert "internal error" not in _text(harness.supervisor.log_path)


class TestWaitAtTheLimit:
    @needs_pids
    def test_a_path_wait_ends_without_a_thread_to_close_its_watch(self, tmp_path: Path) -> None:
        """A path wait that watched (inotify) hands its descriptor to a closing thread; with
        none to be had it closes it itself (before: a traceback once the path had appeared)."""

        def create_later() -> None:
            time.sleep(0.5)
            (tmp_path / "ready").write_text("")

        maker = threading.Thread(target=create_later)
        with PidsCgroup(1) as cgroup:
            maker.start()
            try:
                argv = [NODEROLE, "--root", str(tmp_path), "wait", "--path", "/ready"]
                done = cgroup.run([*argv, "--timeout", "60"], timeout=120)
            finally:
                maker.join()
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert "waiting for /ready" in done.stderr  # it watched: the path came later
