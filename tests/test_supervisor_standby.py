"""A daemon's interpreter started ahead of need (``Supervisor.prepare``), with real processes."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from noderole.supervisor._proc import is_alive
from tests.supervisor_fixtures import Harness, harness, wait_for

__all__ = ["harness"]  # the fixture, imported for pytest

SLEEP = "exec sleep 1000"


def _standby_pid(h: Harness) -> int:
    standby = h.supervisor._standby
    assert standby is not None
    h.extra_pids.append(standby.process.pid)
    return standby.process.pid


class TestStandby:
    def test_the_first_start_lets_the_standby_go(self, harness: Harness) -> None:
        """The daemon a start needs is the prepared standby's (its session), not a new spawn."""
        harness.supervisor.prepare()
        standby = _standby_pid(harness)
        status = harness.supervisor.start(harness.spec("a", SLEEP))
        assert status.state == "running"
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        assert os.getsid(daemon) == standby
        assert harness.supervisor._standby is None
        assert "supervising from" in harness.supervisor.log_path.read_text()

    def test_a_standby_touches_nothing_until_it_goes(self, harness: Harness) -> None:
        """Prepared, then discarded: no run directory, no log, and the standby is gone."""
        harness.supervisor.prepare()
        standby = _standby_pid(harness)
        harness.supervisor.discard()
        assert not is_alive(standby)
        assert not harness.run_dir.exists()
        assert not harness.supervisor.log_path.exists()
        assert harness.leftovers() == []

    def test_a_standby_ends_by_itself_when_its_client_is_gone(self, harness: Harness) -> None:
        """A client that exits without a go (its socket closed) leaves no standby behind."""
        harness.supervisor.prepare()
        standby = _standby_pid(harness)
        prepared = harness.supervisor._standby
        assert prepared is not None
        prepared.channel.close()
        wait_for(lambda: prepared.process.poll() is not None, "the standby to exit")
        assert prepared.process.returncode == 0
        assert not is_alive(standby)
        assert not harness.run_dir.exists()

    def test_no_standby_while_a_daemon_runs(self, harness: Harness) -> None:
        """prepare() with a daemon already answering starts nothing."""
        harness.supervisor.ensure_running()
        harness.supervisor.prepare()
        assert harness.supervisor._standby is None

    def test_a_dead_standby_falls_back_to_a_fresh_daemon(self, harness: Harness) -> None:
        """A standby killed before its go: the start spawns a daemon as without one."""
        harness.supervisor.prepare()
        standby = _standby_pid(harness)
        prepared = harness.supervisor._standby
        assert prepared is not None
        os.kill(standby, signal.SIGKILL)
        prepared.process.wait()
        status = harness.supervisor.start(harness.spec("a", SLEEP))
        assert status.state == "running"
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        assert os.getsid(daemon) != standby

    def test_prepare_twice_keeps_one_standby(self, harness: Harness) -> None:
        """A second prepare() keeps the first standby."""
        harness.supervisor.prepare()
        first = _standby_pid(harness)
        harness.supervisor.prepare()
        assert _standby_pid(harness) == first
        harness.supervisor.discard()
        assert not is_alive(first)


class TestOneStartForManyThreads:
    def test_threads_finding_no_daemon_wait_for_one_start(
        self, harness: Harness, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Threads of one client that all find no daemon (one per service in an apply) wait for
        the first one's start: one daemon, and no thread asks for it a second time."""
        supervisor = harness.supervisor
        threads = 8
        everyone_looked = threading.Barrier(threads)
        answers: list[int | None] = []
        real = supervisor.daemon_pid
        seen = threading.local()

        def counted() -> int | None:
            answer = real()
            answers.append(answer)
            if not getattr(seen, "once", False):
                seen.once = True
                everyone_looked.wait(timeout=60)  # each found no daemon before any starts one
            return answer

        monkeypatch.setattr(supervisor, "daemon_pid", counted)
        workers = [threading.Thread(target=supervisor.ensure_running) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
        assert not any(worker.is_alive() for worker in workers)
        # Each thread's first look, plus the starter's look under the starter lock.
        assert answers.count(None) == threads + 1
        assert len(answers) == threads + 1
        assert len(harness.daemons()) == 1
