"""A daemon's interpreter started ahead of need (``Supervisor.prepare``), with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from noderole.supervisor._proc import is_alive
from tests.supervisor_fixtures import Harness, harness, wait_for

__all__ = ["harness"]  # the fixture, imported for pytest

SLEEP = "exec sleep 1000"


def _standby_pid(h: Harness) -> int:
    standby = h.supervisor._standby
    assert standby is not None
    h.extra_pids.append(standby.pid)
    return standby.pid


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
        wait_for(lambda: prepared.poll() is not None, "the standby to exit")
        assert prepared.poll() == 0
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
        wait_for(lambda: prepared.poll() is not None, "the standby to die")
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


def _run_caller(harness: Harness, before: str, after: str = "") -> list[int]:
    """Run a client in its own interpreter: ``before`` (what its parent left it), then prepare a
    standby and start the daemon from it, then ``after``. Returns the pids it printed (the
    standby's, the daemon's, then any of ``after``), each ended by the harness."""
    code = (
        "import os, signal, sys\n"
        "from noderole.supervisor import Supervisor\n"
        f"{before}"
        "s = Supervisor(sys.argv[1], log_path=sys.argv[2])\n"
        "s.prepare()\n"
        "assert s._standby is not None\n"
        "print(s._standby.pid, file=sys.stderr, flush=True)\n"
        "s.ensure_running()\n"
        "print(s.daemon_pid(), file=sys.stderr, flush=True)\n"
        f"{after}"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(harness.run_dir), str(harness.supervisor.log_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    pids = [int(word) for word in done.stderr.split() if word.isdigit()]
    harness.extra_pids.extend(pids)
    assert done.returncode == 0, done.stderr
    return pids


class TestWhatTheStandbyInherits:
    """posix_spawn has no close_fds and no cwd: the standby settles itself before it waits."""

    def test_an_inheritable_descriptor_of_the_caller_does_not_live_on(
        self, harness: Harness
    ) -> None:
        """A pipe the caller's parent reads to the end (a boot script's `noderole apply | log`
        with an inherited descriptor) sees its end: the standby keeps only stdio and its socket,
        and sits in /, not in the caller's directory."""
        read_end, write_end = os.pipe()
        try:
            os.set_inheritable(write_end, True)
            harness.supervisor.prepare()
            standby = _standby_pid(harness)
        finally:
            os.close(write_end)
        os.set_blocking(read_end, False)

        def at_end() -> bool:
            try:
                return os.read(read_end, 1) == b""  # nobody holds the write end any more
            except BlockingIOError:
                return False  # the standby still does

        try:
            wait_for(at_end, "the standby to close the pipe it inherited")
            assert os.readlink(f"/proc/{standby}/cwd") == "/"
            held = {
                os.readlink(f"/proc/{standby}/fd/{fd}") for fd in os.listdir(f"/proc/{standby}/fd")
            }
            assert held == {os.devnull, os.readlink(f"/proc/{standby}/fd/3")}  # its socket
        finally:
            os.close(read_end)
        harness.supervisor.discard()
        assert not is_alive(standby)

    def test_a_caller_without_stdin_still_hands_over_the_socket(self, harness: Harness) -> None:
        """A caller started with fds 0 and 1 closed gets its socket pair there (the standby's
        end on 1): that end is moved to 3 before /dev/null takes 0, 1 and 2, and the go still
        starts the daemon from the standby."""
        pids = _run_caller(harness, "os.close(0)\nos.close(1)\n")
        standby, daemon = pids
        assert harness.supervisor.daemon_pid() == daemon
        assert os.getsid(daemon) == standby  # the standby's session: it was the one that went


class TestACallerIgnoringSigchld:
    def test_the_standby_still_starts_and_ends(self, harness: Harness) -> None:
        """A parent that left SIGCHLD ignored (inherited across exec) has its children reaped by
        the kernel: waiting for the standby then fails with ECHILD. The go still starts the
        daemon, and an unneeded standby is still ended, without an error."""
        pids = _run_caller(
            harness,
            "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n",
            "spare = Supervisor(sys.argv[1] + '-spare', log_path=sys.argv[2] + '-spare')\n"
            "spare.prepare()\n"
            "print(spare._standby.pid, file=sys.stderr, flush=True)\n"
            "spare.discard()\n",
        )
        standby, daemon, spare = pids
        assert harness.supervisor.daemon_pid() == daemon
        assert os.getsid(daemon) == standby  # the standby went
        assert not is_alive(spare)


class TestAnInterruptedStart:
    """Ctrl-C (or a SIGTERM made one: a rehearsal's) while the client waits for the first word
    of the daemon it has just started. The daemon starts anyway; what then?"""

    @staticmethod
    def _interrupt_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
        """The client's first wait for a word is interrupted, as by a Ctrl-C landing in it."""
        from noderole.supervisor import _client

        real = _client._read_line
        interrupted: list[int] = []

        def read_line(fd: int, timeout: float) -> str:
            if not interrupted:
                interrupted.append(fd)
                raise KeyboardInterrupt
            return real(fd, timeout)

        monkeypatch.setattr(_client, "_read_line", read_line)

    @pytest.mark.parametrize("prepared", [False, True], ids=["spawned", "standby"])
    def test_close_hears_the_start_out_and_ends_the_daemon(
        self, harness: Harness, monkeypatch: pytest.MonkeyPatch, prepared: bool
    ) -> None:
        """close() (a rehearsal's clean-up) waits for the word of the start an interrupt cut
        short, then shuts that daemon down: none is left. Before, the clean-up's shutdown found
        no daemon answering yet, and one came up after it, in a scratch root just removed."""
        from noderole.supervisor import SupervisorError
        from noderole.testing import supervisor_processes

        if prepared:
            harness.supervisor.prepare()
            _standby_pid(harness)
        self._interrupt_the_wait(monkeypatch)
        with pytest.raises(KeyboardInterrupt):
            harness.supervisor.ensure_running()
        harness.supervisor.close()
        assert supervisor_processes(harness.root) == ([], [])
        assert "supervising from" in harness.supervisor.log_path.read_text()
        with pytest.raises(SupervisorError, match="was shut down"):
            harness.supervisor.ensure_running()

    def test_a_daemon_whose_starter_died_goes_at_once(self, harness: Harness) -> None:
        """A daemon whose starter was killed while it waited for the first word (SIGKILL, an
        OOM kill) has nobody to serve: with nothing to supervise it exits at once, saying why,
        rather than after its start-up grace of ten seconds."""
        from noderole.testing import eventually, supervisor_processes

        starter = (
            "import os, signal, sys\n"
            "from noderole.supervisor import Supervisor, _client\n"
            "_client._read_line = lambda fd, timeout: os.kill(os.getpid(), signal.SIGKILL)\n"
            "Supervisor(sys.argv[1]).ensure_running()\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", starter, str(harness.run_dir)], timeout=60, check=False
        )
        assert done.returncode == -signal.SIGKILL
        log = harness.supervisor.log_path
        eventually(lambda: "gave up waiting for it" in log.read_text(), "the daemon's word on it")
        eventually(lambda: supervisor_processes(harness.root) == ([], []), "the daemon to exit")
