"""The native supervisor, with real processes, signals and sockets (tmp_path as the run dir)."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from noderole.records import Supervision
from noderole.supervisor import ProcessSpec, ReadinessSpec, Supervisor, SupervisorError, _protocol
from noderole.supervisor._log import ERRORS_NAME
from noderole.supervisor._proc import describe_status, group_members, is_alive, proc_stat
from noderole.supervisor._protocol import encode, socket_address
from noderole.supervisor._record import replace
from noderole.supervisor.probes import CommandProbe, HttpProbe, PathProbe, TcpProbe
from tests.supervisor_fixtures import Harness, harness, wait_for

__all__ = ["harness"]  # the fixture, imported for pytest

SLEEP = "exec sleep 1000"


def _read_pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _connect(harness: Harness) -> socket.socket:
    """A new connection to the daemon's socket (blocking, with a generous timeout)."""
    address, dirfd = socket_address(str(harness.supervisor.socket_path))
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    finally:
        if dirfd is not None:
            os.close(dirfd)
    sock.settimeout(30)
    return sock


def _ask(harness: Harness, request: bytes) -> bytes:
    """Send ``request`` as is on a new connection; everything the daemon says, to its EOF."""
    with _connect(harness) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


class TestStart:
    def test_start_runs_the_process_and_writes_its_pid(self, harness: Harness) -> None:
        """start() runs the command, reports it running, and the pidfile holds the child's pid."""
        pidfile = harness.root / "run" / "a.pid"
        status = harness.supervisor.start(harness.spec("a", SLEEP, pidfile=str(pidfile)))
        assert status.state == "running"
        assert status.pid is not None
        assert is_alive(status.pid)
        assert pidfile.read_text() == f"{status.pid}\n"
        assert status.pid != harness.supervisor.daemon_pid()

    def test_same_fingerprint_is_already_running(self, harness: Harness) -> None:
        """A second start with the same fingerprint starts nothing and says already_running."""
        first = harness.supervisor.start(harness.spec("a", SLEEP))
        again = harness.supervisor.start(harness.spec("a", SLEEP))
        assert again.already_running
        assert again.pid == first.pid
        assert first.pid is not None
        assert harness.settled_marked([first.pid]) == [first.pid]

    def test_a_service_waiting_to_respawn_is_started_now(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        """A start of a service in backoff (its process exited, the respawn delay runs) starts
        it now, as `systemctl start` does a unit waiting to restart: "already running" with the
        dead process's pid let `apply` print "Started" and exit 0 for a service that was not
        running (and that a full pids.max could not start)."""
        marker = tmp_path / "ran-once"
        script = f"if [ -e {marker} ]; then exec sleep 1000; fi; touch {marker}; exit 1"
        sup = Supervision(respawn_delay=600, stop_timeout=2)
        first = harness.supervisor.start(harness.spec("a", script, supervision=sup))
        wait_for(
            lambda: harness.supervisor.status(["a"])[0].state == "backoff", "the exit, in backoff"
        )
        again = harness.supervisor.start(harness.spec("a", script, supervision=sup))
        assert not again.already_running
        assert again.state == "running"
        assert again.pid is not None
        assert again.pid != first.pid
        assert is_alive(again.pid)
        assert harness.settled_marked([again.pid]) == [again.pid]

    def test_a_supervisor_log_that_cannot_be_opened_does_not_stop_the_services(
        self, harness: Harness
    ) -> None:
        """/var/log full at the first boot (a partition of its own), out of inodes, or
        something else at the log's path: the daemon logs to its run directory instead, says
        so, and starts the services. Before, every service failed ("cannot open the supervisor
        log") and `stop` could not stop what ran."""
        said: list[str] = []
        log = harness.root / "var/log/noderole/supervisor.log"
        log.mkdir(parents=True)  # in the way of the file, as a full file system would be
        harness.supervisor.warn = said.append
        status = harness.supervisor.start(harness.spec("a", SLEEP))
        assert status.state == "running"
        fallback = harness.run_dir / "supervisor.log"
        assert any(
            f"cannot open the supervisor log {log}" in line and str(fallback) in line
            for line in said
        ), said
        wait_for(lambda: fallback.exists() and fallback.stat().st_size > 0, "the daemon's log")

    def test_changed_fingerprint_replaces_the_process(self, harness: Harness) -> None:
        """A new fingerprint stops the old process (gone) and starts the new one."""
        first = harness.supervisor.start(harness.spec("a", SLEEP, fingerprint="v1"))
        second = harness.supervisor.start(harness.spec("a", SLEEP, fingerprint="v2"))
        assert not second.already_running
        assert second.pid != first.pid
        assert second.fingerprint == "v2"
        assert first.pid is not None
        assert not is_alive(first.pid)
        assert "replaced" in second.reason
        assert second.pid is not None
        assert harness.settled_marked([second.pid]) == [second.pid]

    def test_restart_starts_a_new_process(self, harness: Harness) -> None:
        """restart() replaces the process even with the same fingerprint."""
        first = harness.supervisor.start(harness.spec("a", SLEEP))
        second = harness.supervisor.restart(harness.spec("a", SLEEP))
        assert second.state == "running"
        assert second.pid != first.pid
        assert second.pid is not None
        assert harness.settled_marked([second.pid]) == [second.pid]

    def test_environment_cwd_and_stdin(self, harness: Harness) -> None:
        """The child gets exactly the spec's environment, its cwd, and stdin from /dev/null."""
        out = harness.root / "out"
        workdir = harness.root / "work"
        workdir.mkdir()
        script = f"env > {out}.tmp; pwd >> {out}.tmp; readlink /proc/self/fd/0 >> {out}.tmp; "
        script += f"mv {out}.tmp {out}; {SLEEP}"
        spec = harness.spec("a", script, cwd=str(workdir), environment={"TOKEN": "s3=cr=t"})
        harness.supervisor.start(spec)
        lines = wait_for(lambda: _lines(out), "the child's report")
        env = dict(line.split("=", 1) for line in lines[:-2] if "=" in line)
        env.pop("PWD", None)  # sh sets it
        env.pop("SHLVL", None)
        assert env == dict(spec.environment)
        assert lines[-2:] == [str(workdir), "/dev/null"]

    def test_runs_as_the_given_user(self, harness: Harness) -> None:
        """user/group: the child runs with that uid and gid."""
        if os.geteuid() != 0:
            pytest.skip("changing user needs root")
        out = harness.root / "id"  # written by the supervisor: nobody cannot write in tmp_path
        spec = harness.spec("a", f"id -u; id -g; {SLEEP}", stdout_log=str(out))
        spec = replace(spec, user="nobody", group="nogroup")
        harness.supervisor.start(spec)
        wait_for(lambda: len(_lines(out)) == 2, "id output")
        assert _lines(out) == ["65534", "65534"]

    def test_missing_executable_is_crashed_with_the_reason(self, harness: Harness) -> None:
        """A command that cannot be executed comes back crashed, naming the path."""
        spec = ProcessSpec(name="a", argv=("/nonexistent/bin/x",), fingerprint="f")
        status = harness.supervisor.start(spec)
        assert status.state == "crashed"
        assert "/nonexistent/bin/x" in status.reason

    def test_unknown_user_is_crashed_with_the_reason(self, harness: Harness) -> None:
        """An unknown user fails the start with a reason naming the user."""
        spec = replace(harness.spec("a", SLEEP), user="no-such-user-x")
        status = harness.supervisor.start(spec)
        assert status.state == "crashed"
        assert "no-such-user-x" in status.reason


class TestRespawn:
    def test_killed_child_is_respawned(self, harness: Harness) -> None:
        """kill -9 of the child: a new pid runs, restarts=1, last exit shown, pidfile rewritten."""
        pidfile = harness.root / "a.pid"
        first = harness.supervisor.start(harness.spec("a", SLEEP, pidfile=str(pidfile)))
        assert first.pid is not None
        status = harness.kill_and_await_respawn("a", first.pid)
        assert status.state == "running"
        assert status.pid != first.pid
        assert status.last_exit == "signal SIGKILL"
        assert pidfile.read_text().strip() == str(status.pid)

    def test_crash_loop_gives_up_after_exactly_respawn_max(self, harness: Harness) -> None:
        """A process that always fails runs 1 + respawn_max times, then is crashed (openrc#247)."""
        runs = harness.root / "runs"
        sup = Supervision(respawn_delay=0.01, respawn_max=3, respawn_period=3600)
        keeper = harness.spec("keeper", SLEEP)  # keeps the daemon alive after the crash
        harness.supervisor.start(keeper)
        harness.supervisor.start(harness.spec("a", f"echo x >> {runs}; exit 3", supervision=sup))
        status = wait_for(
            lambda: next(
                (s for s in harness.supervisor.status(["a"]) if s.state == "crashed"), None
            ),
            "the crash loop to give up",
        )
        assert status.restarts == 3
        assert len(_lines(runs)) == 4
        assert status.last_exit == "exit 3"
        assert "gave up after 3 respawns" in status.reason

    def test_leftover_grandchild_is_killed_before_respawn(self, harness: Harness) -> None:
        """When the leader dies, what it left in its group is killed: never two copies running."""
        kids = harness.root / "kids"
        script = f"sleep 1000 & echo $! >> {kids}; {SLEEP}"
        first = harness.supervisor.start(harness.spec("a", script))
        old_kid = wait_for(lambda: _read_pids(kids), "the grandchild")[0]
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        wait_for(lambda: len(_read_pids(kids)) == 2, "the respawned grandchild")
        wait_for(lambda: not is_alive(old_kid), "the old grandchild to die")

    def test_a_process_scope_exit_leaves_its_group_running(self, harness: Harness) -> None:
        """stop_scope="process": the process's exit ends nothing else; it is respawned."""
        kids = harness.root / "kids"
        script = f"sleep 1000 & echo $! >> {kids}; {SLEEP}"
        sup = Supervision(respawn_delay=0.05, stop_scope="process")
        first = harness.supervisor.start(harness.spec("a", script, supervision=sup))
        [old_kid] = wait_for(lambda: _read_pids(kids), "the grandchild")
        harness.extra_pids.append(old_kid)
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        new_kid = wait_for(lambda: _read_pids(kids)[1:], "the respawned grandchild")[0]
        harness.extra_pids.append(new_kid)
        assert is_alive(old_kid)

    def test_stop_during_respawn_delay_starts_nothing(self, harness: Harness) -> None:
        """A stop that arrives while a respawn is pending never starts a new child (openrc#375)."""
        runs = harness.root / "runs"
        harness.supervisor.start(harness.spec("keeper", SLEEP))
        sup = Supervision(respawn_delay=0.5)
        harness.supervisor.start(harness.spec("a", f"echo x >> {runs}; exit 1", supervision=sup))
        wait_for(
            lambda: harness.supervisor.status(["a"])[0].state == "backoff", "the respawn delay"
        )
        [stopped] = harness.supervisor.stop(["a"])
        assert stopped.state == "stopped"
        time.sleep(1.0)  # past the delay: a racing respawn would have run by now
        assert len(_lines(runs)) == 1
        assert harness.supervisor.status(["a"])[0].state == "stopped"


class TestStop:
    def test_stop_ends_the_process_and_removes_the_pidfile(self, harness: Harness) -> None:
        """stop() returns once the process is gone; the pidfile is removed."""
        pidfile = harness.root / "a.pid"
        started = harness.supervisor.start(harness.spec("a", SLEEP, pidfile=str(pidfile)))
        [status] = harness.supervisor.stop(["a"])
        assert status.state == "stopped"
        assert status.last_exit == "signal SIGTERM"
        assert started.pid is not None
        assert not is_alive(started.pid)
        assert not pidfile.exists()

    def test_sigterm_ignored_is_escalated_to_sigkill(self, harness: Harness) -> None:
        """A child that ignores SIGTERM is SIGKILLed after stop_timeout and is gone."""
        ready = harness.root / "ready"
        sup = Supervision(respawn_delay=0.05, stop_timeout=0.2)
        spec = harness.spec("a", f"trap '' TERM; touch {ready}; {SLEEP}", supervision=sup)
        started = harness.supervisor.start(spec)
        wait_for(ready.exists, "the trap to be set")
        [status] = harness.supervisor.stop(["a"])
        assert status.last_exit == "signal SIGKILL"
        assert started.pid is not None
        assert not is_alive(started.pid)

    def test_every_name_asked_is_stopped_whatever_the_waves(self, harness: Harness) -> None:
        """Waves that leave out a name asked for stopped only what they held, and answered ok:
        the names no wave holds are stopped last; a name given twice is stopped once."""
        for name in ("a", "b", "c"):
            harness.supervisor.start(harness.spec(name, SLEEP))
        statuses = harness.supervisor.stop(["a", "b"], waves=[["a", "a"]])
        assert sorted(s.name for s in statuses) == ["a", "b"]
        assert {s.state for s in statuses} == {"stopped"}
        assert harness.supervisor.stop(["c"], waves=[])[0].state == "stopped"

    @pytest.mark.parametrize("together", [True, False], ids=["one wave", "one by one"])
    def test_the_services_of_a_wave_stop_together(self, harness: Harness, together: bool) -> None:
        """Two services that ignore SIGTERM and depend on none of each other: given as one
        wave, both get their stop signal at once, so the stop takes one stop_timeout, not two
        (a thousand services with a tenth ignoring SIGTERM took 500 s, past the client's 300 s,
        which then said the supervisor did not answer). Without waves, one after another, as
        asked. What b's trap sees of a tells which: a is still running (it ignores SIGTERM
        until its SIGKILL) when both were signalled together."""
        seen = harness.root / "seen"
        first = harness.root / "first.pid"
        sup = Supervision(respawn_delay=0.05, stop_timeout=1)
        ready = [harness.root / "a.ready", harness.root / "b.ready"]
        a = harness.supervisor.start(
            harness.spec("a", f"trap '' TERM; touch {ready[0]}; {SLEEP}", supervision=sup)
        )
        first.write_text(f"{a.pid}\n")
        trap = (
            f"if kill -0 $(cat {first}) 2>/dev/null; then echo alive; else echo gone; fi > {seen}"
        )
        harness.supervisor.start(
            harness.spec(
                "b",
                # `wait` is cut short by the signal, so the trap runs at once; a foreground
                # `sleep 1` held it back until the sleep ended, up to a's own SIGKILL a second
                # after both were signalled, and the test read "gone" under load.
                f"trap '{trap}' TERM; touch {ready[1]}; while :; do sleep 1 & wait $!; done",
                supervision=sup,
            )
        )
        wait_for(lambda: all(path.exists() for path in ready), "the traps to be set")
        waves = [["a", "b"]] if together else None
        statuses = harness.supervisor.stop(["a", "b"], waves=waves)
        assert sorted(s.name for s in statuses) == ["a", "b"]
        assert {s.state for s in statuses} == {"stopped"}
        assert seen.read_text() == ("alive\n" if together else "gone\n")

    def test_grandchildren_do_not_survive_stop(self, harness: Harness) -> None:
        """Every process of the child's group is gone when stop() returns (checked by pid)."""
        kids = harness.root / "kids"
        script = (
            f"trap '' TERM; (trap '' TERM; exec sleep 1000) & echo $! >> {kids}; "
            f"sleep 1000 & echo $! >> {kids}; wait"
        )
        sup = Supervision(stop_timeout=0.2)
        started = harness.supervisor.start(harness.spec("a", script, supervision=sup))
        pids = wait_for(lambda: len(_read_pids(kids)) == 2 and _read_pids(kids), "grandchildren")
        harness.supervisor.stop(["a"])
        assert started.pid is not None
        assert [p for p in [started.pid, *pids] if is_alive(p)] == []
        assert group_members(started.pid) == []

    def test_a_process_scope_stop_ends_the_process_alone(self, harness: Harness) -> None:
        """stop_scope="process" (k3s): the stop signals the service's process, and what it
        started in its group runs on (as containers run on through a restart of k3s); a
        process that ignores the signal is still SIGKILLed, alone."""
        kids = harness.root / "kids"
        ready = harness.root / "ready"
        script = f"trap '' TERM; sleep 1000 & echo $! >> {kids}; touch {ready}; wait"
        sup = Supervision(stop_timeout=0.2, stop_scope="process")
        started = harness.supervisor.start(harness.spec("a", script, supervision=sup))
        [kid] = wait_for(lambda: ready.exists() and _read_pids(kids), "the grandchild")
        harness.extra_pids.append(kid)
        [status] = harness.supervisor.stop(["a"])
        assert (status.state, status.last_exit, status.reason) == (
            "stopped",
            "signal SIGKILL",
            "stopped",
        )
        assert started.pid is not None
        assert not is_alive(started.pid)
        assert is_alive(kid)
        assert group_members(started.pid) == [kid]

    def test_a_process_scope_stop_during_backoff_signals_nothing(self, harness: Harness) -> None:
        """Between an exit and its respawn, a process-scope stop has no process to signal:
        what the last one left runs on."""
        kids = harness.root / "kids"
        script = f"sleep 1000 & echo $! >> {kids}; exit 1"
        sup = Supervision(respawn_delay=30, stop_scope="process")
        harness.supervisor.start(harness.spec("a", script, supervision=sup))
        [kid] = wait_for(lambda: _read_pids(kids), "the grandchild")
        harness.extra_pids.append(kid)
        wait_for(
            lambda: harness.supervisor.status(["a"])[0].state == "backoff", "the respawn delay"
        )
        [status] = harness.supervisor.stop(["a"])
        assert (status.state, status.reason) == ("stopped", "stopped")
        assert is_alive(kid)

    def test_stop_in_the_given_order(self, harness: Harness) -> None:
        """stop() handles names in order and reports unknown names as not supervised."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        harness.supervisor.start(harness.spec("b", SLEEP))
        statuses = harness.supervisor.stop(["b", "nope", "a"])
        assert [s.name for s in statuses] == ["b", "nope", "a"]
        assert [s.state for s in statuses] == ["stopped"] * 3
        assert statuses[1].reason == "not supervised"

    def test_stop_of_thousands_that_finish_at_once(self, harness: Harness) -> None:
        """Stops that finish without waiting do not recurse once per name (RecursionError)."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        names = [f"x{i}" for i in range(3000)]
        statuses = harness.supervisor.stop([*names, "a"])
        assert [s.name for s in statuses] == [*names, "a"]
        assert {s.state for s in statuses} == {"stopped"}


class TestDaemon:
    def test_daemon_exits_when_nothing_is_left(self, harness: Harness) -> None:
        """After the last service stops the daemon exits; status still answers from the state."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        harness.supervisor.stop(["a"])
        wait_for(lambda: not is_alive(daemon), "the daemon to exit")
        assert [(s.name, s.state) for s in harness.supervisor.status()] == [("a", "stopped")]
        assert harness.leftovers() == []

    def test_crashed_status_outlives_the_daemon(self, harness: Harness) -> None:
        """A service that gave up is still reported crashed, with its last exit, after exit."""
        sup = Supervision(respawn_delay=0.01, respawn_max=1)
        harness.supervisor.start(harness.spec("a", "exit 7", supervision=sup))
        wait_for(lambda: not harness.daemons(), "the daemon to exit")
        [status] = harness.supervisor.status(["a"])
        assert (status.state, status.last_exit, status.restarts) == ("crashed", "exit 7", 1)

    def test_status_without_any_daemon(self, harness: Harness) -> None:
        """status() works before any daemon ever ran: nothing known, named ones stopped."""
        assert harness.supervisor.status() == []
        [status] = harness.supervisor.status(["x"])
        assert status.state == "stopped"
        assert status.pid is None
        assert harness.daemons() == []

    def test_two_callers_start_one_daemon(self, harness: Harness) -> None:
        """Two processes calling ensure_running at once end up with one daemon."""
        code = (
            "import sys; from pathlib import Path; from noderole.supervisor import Supervisor; "
            "s = Supervisor(Path(sys.argv[1])); s.ensure_running(); print(s.daemon_pid())"
        )
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code, str(harness.run_dir)], stdout=subprocess.PIPE
            )
            for _ in range(3)
        ]
        harness.extra_pids.extend(p.pid for p in procs)
        pids = {int(p.communicate(timeout=60)[0]) for p in procs}
        assert len(pids) == 1
        assert harness.daemons() == list(pids)

    def test_sigterm_to_the_daemon_stops_everything(self, harness: Harness) -> None:
        """SIGTERM to the supervisor stops every service, then it exits."""
        started = harness.supervisor.start(harness.spec("a", SLEEP))
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        assert started.pid is not None
        os.kill(daemon, signal.SIGTERM)
        wait_for(lambda: not is_alive(daemon), "the daemon to exit")
        assert not is_alive(started.pid)
        assert harness.supervisor.status(["a"])[0].state == "stopped"

    def test_other_protocol_version_is_refused(self, harness: Harness) -> None:
        """A request of another protocol version gets an error naming both versions."""
        harness.supervisor.ensure_running()
        address, dirfd = socket_address(str(harness.supervisor.socket_path))
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(address)
            if dirfd is not None:
                os.close(dirfd)
            sock.sendall(encode({"v": 99, "op": "status"}))
            answer = json.loads(sock.makefile().read())
        assert answer["ok"] is False
        assert "99" in answer["error"]

    def test_a_request_nested_too_deeply_is_answered_and_let_go(self, harness: Harness) -> None:
        """A request nested deeper than the JSON parser recurses gets an error answer, not a
        RecursionError; its connection is let go, so the daemon and its watchdog still exit
        once the last service stops."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        depth = 100_000
        request = (
            b'{"v":%d,"op":"status","x":' % _protocol.PROTOCOL_VERSION
            + b"[" * depth
            + b"]" * depth
            + b"}\n"
        )
        answer = json.loads(_ask(harness, request))
        assert answer["ok"] is False
        assert "nested too deeply" in answer["error"]
        harness.supervisor.stop(["a"])
        wait_for(lambda: not is_alive(daemon), "the daemon to exit")
        wait_for(lambda: not harness.watchdogs(), "its watchdog to exit")
        errors = harness.supervisor.log_path.with_name(ERRORS_NAME)
        assert not errors.exists() or "RecursionError" not in errors.read_text()
        assert "RecursionError" not in harness.supervisor.log_path.read_text()

    def test_clients_that_never_read_their_answer_hold_up_nothing(self, harness: Harness) -> None:
        """Clients that ask for a large answer (5,000 names, about 1 MB) and never read it:
        the daemon answers every other client meanwhile, respawns a killed service, gives a
        reading client its whole answer, and lets the others go (it exits once idle)."""
        started = harness.supervisor.start(harness.spec("a", SLEEP))
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        assert started.pid is not None
        names = [f"made-up-{i}" for i in range(5000)]
        large = encode({"v": _protocol.PROTOCOL_VERSION, "op": "status", "names": names})
        stuck: list[socket.socket] = []
        try:
            for _ in range(10):
                stuck.append(_connect(harness))
                stuck[-1].sendall(large)
            # Each would have stopped the daemon for 2 s: a status asked now said "not
            # answering" and no respawn came for 20 s.
            [status] = harness.supervisor.status(["a"])
            assert "not answering" not in status.reason
            assert status.pid == started.pid
            os.kill(started.pid, signal.SIGKILL)
            respawned = wait_for(
                lambda: next(
                    (
                        s
                        for s in harness.supervisor.status(["a"])
                        if s.restarts == 1 and s.pid and "not answering" not in s.reason
                    ),
                    None,
                ),
                "a respawn while the clients leave their answers unread",
            )
            assert respawned.pid != started.pid
            hello, answer = map(json.loads, _ask(harness, large).splitlines())
            assert hello["accepted"] is True
            assert [s["name"] for s in answer["statuses"]] == names
            harness.supervisor.stop(["a"])
            # The unread answers are given up on, their connections closed and uncounted.
            wait_for(lambda: not is_alive(daemon), "the daemon to exit")
        finally:
            for sock in stuck:
                sock.close()

    def test_a_client_that_reads_slowly_gets_its_answer(self, harness: Harness) -> None:
        """A client reading its large answer steadily but slowly (32 KB every half second):
        a stream socket is reported writable only once most of its buffer is read, so the
        daemon sent nothing for 2 s and dropped it as one that read nothing, after about
        220 KB. It gets its answer on as long as it keeps taking some."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        names = [f"made-up-{i:05d}-" + "x" * 40 for i in range(20000)]
        large = encode({"v": _protocol.PROTOCOL_VERSION, "op": "status", "names": names})
        slow = _connect(harness)
        try:
            slow.sendall(large)
            received = 0
            while received < 600_000:  # far past where it was dropped
                time.sleep(0.5)
                chunk = slow.recv(32 * 1024)
                assert chunk, f"dropped after {received} bytes"
                received += len(chunk)
        finally:
            slow.close()
        harness.supervisor.stop(["a"])

    def test_exit_gives_slow_readers_a_short_while(self, harness: Harness) -> None:
        """At exit the daemon let answers still going out run to their 30 s limit, the
        abstract name unanswered meanwhile: every client said the supervisor hung, with its
        services unsupervised. The drain now gives them ANSWER_STALL seconds in all."""
        import threading

        from noderole.supervisor._server import ANSWER_STALL

        harness.supervisor.start(harness.spec("a", SLEEP))
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        names = [f"made-up-{i:05d}-" + "x" * 60 for i in range(20000)]
        large = encode({"v": _protocol.PROTOCOL_VERSION, "op": "status", "names": names})
        readers = [_connect(harness) for _ in range(3)]
        stop = threading.Event()

        def trickle(sock: socket.socket) -> None:  # takes what is there now and then
            sock.setblocking(False)
            while not stop.is_set():
                try:
                    if not sock.recv(1 << 20):
                        return
                except BlockingIOError:
                    stop.wait(1.0)
                except OSError:
                    return

        threads = [threading.Thread(target=trickle, args=(r,), daemon=True) for r in readers]
        try:
            for reader in readers:
                reader.sendall(large)
            for thread in threads:
                thread.start()
            time.sleep(0.5)
            os.kill(daemon, signal.SIGTERM)
            # Before: about 29 s; the wait below is bounded far below that.
            wait_for(lambda: not is_alive(daemon), "the daemon to exit", timeout=4 * ANSWER_STALL)
        finally:
            stop.set()
            for reader in readers:
                reader.close()

    def test_socket_is_private(self, harness: Harness) -> None:
        """The control socket is mode 0600."""
        harness.supervisor.ensure_running()
        assert harness.supervisor.socket_path.stat().st_mode & 0o777 == 0o600

    def test_deep_run_dir(self, tmp_path: Path) -> None:
        """A run dir deeper than a unix socket path allows still works."""
        deep = tmp_path / ("d" * 60) / ("e" * 60) / "run"
        h = Harness(root=tmp_path, supervisor=Supervisor(deep, timeout=30))
        try:
            status = h.supervisor.start(h.spec("a", SLEEP))
            assert status.state == "running"
        finally:
            h.supervisor.shutdown()
        assert h.leftovers() == []

    def test_unreachable_daemon_is_a_backend_error(self, tmp_path: Path) -> None:
        """A run dir that cannot hold a socket fails with BackendError naming the run dir."""
        blocker = tmp_path / "file"
        blocker.write_text("")
        supervisor = Supervisor(blocker / "run", log_path=tmp_path / "log")
        with pytest.raises((SupervisorError, OSError)):
            supervisor.ensure_running()


class TestRecovery:
    def test_supervisor_sigkill_then_start_runs_exactly_one(self, harness: Harness) -> None:
        """After kill -9 of the supervisor its watchdog ends child and grandchildren; a new start
        then leaves exactly one instance."""
        kids = harness.root / "kids"
        spec = harness.spec("a", f"sleep 1000 & echo $! >> {kids}; {SLEEP}")
        first = harness.supervisor.start(spec)
        old_kid = wait_for(lambda: _read_pids(kids), "the grandchild")[0]
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        assert len(harness.watchdogs()) == 1
        child = first.pid
        assert child is not None
        os.kill(daemon, signal.SIGKILL)
        wait_for(lambda: not is_alive(child), "the watchdog to kill the child")
        wait_for(lambda: not is_alive(old_kid), "the watchdog to kill the grandchild too")
        wait_for(lambda: not harness.watchdogs(), "the watchdog to exit")
        [orphaned] = harness.supervisor.status(["a"])
        assert orphaned.state == "stopped"
        assert orphaned.pid is None

        second = harness.supervisor.start(spec)
        assert second.state == "running"
        assert not second.already_running
        new_kid = wait_for(lambda: len(_read_pids(kids)) == 2 and _read_pids(kids)[1], "new kid")
        assert second.pid is not None
        expected = sorted([second.pid, new_kid])
        assert harness.settled_marked(expected) == expected

    def test_watchdog_keeps_the_last_state_if_the_file_is_lost(self, tmp_path: Path) -> None:
        """The watchdog's copy of the state survives the file being deleted or emptied."""
        from noderole.supervisor import ServiceStatus, _state, _watchdog

        path = tmp_path / _protocol.STATE_NAME
        status = ServiceStatus(name="a", state="running", pid=4242, start_ticks=1)
        _state.write_state(str(path), _state.State(services={"a": status}))
        copy = _watchdog.StateCopy(str(path))
        copy.refresh()
        path.write_bytes(b"")
        copy.refresh()
        path.unlink()
        copy.refresh()
        assert _state.parse_state(copy.raw).services["a"].pid == 4242

    def test_killed_watchdog_is_replaced(self, harness: Harness) -> None:
        """A watchdog killed by someone is started again by the daemon."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        [watchdog] = wait_for(harness.watchdogs, "the watchdog")
        os.kill(watchdog, signal.SIGKILL)
        [replacement] = wait_for(
            lambda: [w for w in harness.watchdogs() if w != watchdog], "a new watchdog"
        )
        assert replacement != watchdog

    def test_child_of_another_user_dies_with_the_supervisor(self, harness: Harness) -> None:
        """A child running as another user also dies when the daemon is SIGKILLed."""
        if os.geteuid() != 0:
            pytest.skip("changing user needs root")
        spec = replace(harness.spec("a", SLEEP), user="nobody")
        status = harness.supervisor.start(spec)
        child = status.pid
        daemon = harness.supervisor.daemon_pid()
        assert child is not None
        assert daemon is not None
        os.kill(daemon, signal.SIGKILL)
        wait_for(lambda: not is_alive(child), "the child to die with its supervisor")

    def test_stop_without_daemon_kills_leftovers(self, harness: Harness) -> None:
        """stop() after the supervisor was SIGKILLed still kills what it left behind."""
        kids = harness.root / "kids"
        harness.supervisor.start(harness.spec("a", f"sleep 1000 & echo $! >> {kids}; {SLEEP}"))
        old_kid = wait_for(lambda: _read_pids(kids), "the grandchild")[0]
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        os.kill(daemon, signal.SIGKILL)
        wait_for(lambda: not is_alive(daemon), "the daemon to die")
        [status] = harness.supervisor.stop(["a"])
        assert status.state == "stopped"
        assert not is_alive(old_kid)

    def test_stop_after_both_were_killed_tells_what_it_ended(self, harness: Harness) -> None:
        """The daemon and its watchdog killed at once: stop(["a"]) starts a daemon, which ends
        what is left of every service (b's too) before it answers, and tells the client what."""
        a = harness.supervisor.start(harness.spec("a", SLEEP))
        b = harness.supervisor.start(harness.spec("b", SLEEP))
        assert a.pid is not None
        assert b.pid is not None
        [daemon], [watchdog] = harness.daemons(), harness.watchdogs()
        # Both stopped first, then killed: neither can act on the other's death (the watchdog
        # would end the services, the daemon fork another watchdog).
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in (daemon, watchdog):
                os.kill(pid, sig)
        wait_for(lambda: not is_alive(daemon) and not is_alive(watchdog), "both to die")
        assert is_alive(a.pid)
        assert is_alive(b.pid)
        [status] = harness.supervisor.stop(["a"])
        assert status.state == "stopped"
        assert harness.supervisor.killed_leftovers == {"a": [a.pid], "b": [b.pid]}
        assert not is_alive(a.pid)
        assert not is_alive(b.pid)
        harness.supervisor.stop(["b"])  # the next stop ended nothing of a killed daemon's
        assert harness.supervisor.killed_leftovers == {}

    def test_stale_pidfile_names_a_live_stranger(self, harness: Harness) -> None:
        """A pidfile naming someone else's process is replaced, and that process is untouched."""
        stranger = subprocess.Popen(["sleep", "1000"])
        harness.extra_pids.append(stranger.pid)
        pidfile = harness.root / "a.pid"
        pidfile.write_text(f"{stranger.pid}\n")
        status = harness.supervisor.start(harness.spec("a", SLEEP, pidfile=str(pidfile)))
        assert pidfile.read_text() == f"{status.pid}\n"
        harness.supervisor.stop(["a"])
        assert is_alive(stranger.pid)
        stranger.kill()
        stranger.wait()


class TestLogs:
    def test_output_is_appended_in_order(self, harness: Harness) -> None:
        """stdout and stderr to one file: appended after old content, in the order written."""
        log = harness.root / "var" / "log" / "a.log"
        log.parent.mkdir(parents=True)
        log.write_text("old\n")
        script = f"echo out1; echo err1 >&2; echo out2; {SLEEP}"
        spec = harness.spec("a", script, stdout_log=str(log), stderr_log=str(log))
        status = harness.supervisor.start(spec)
        assert status.log == str(log)
        wait_for(lambda: len(_lines(log)) == 4, "the output")
        assert _lines(log) == ["old", "out1", "err1", "out2"]

    def test_separate_files_and_parent_dirs_created(self, harness: Harness) -> None:
        """stdout and stderr to two files, in directories that did not exist."""
        out, err = harness.root / "o" / "out.log", harness.root / "e" / "err.log"
        spec = harness.spec(
            "a", f"echo out; echo err >&2; {SLEEP}", stdout_log=str(out), stderr_log=str(err)
        )
        harness.supervisor.start(spec)
        wait_for(lambda: _lines(out) == ["out"] and _lines(err) == ["err"], "both logs")

    def test_sighup_reopens_the_log(self, harness: Harness) -> None:
        """After logrotate moves the file, SIGHUP makes new output go to a new file."""
        log = harness.root / "a.log"
        poke = harness.root / "poke"
        script = (
            f"echo first; while :; do [ -e {poke} ] && {{ rm {poke}; echo next; }}; "
            "sleep 0.01; done"
        )
        harness.supervisor.start(harness.spec("a", script, stdout_log=str(log)))
        wait_for(lambda: _lines(log) == ["first"], "the first line")
        log.rename(log.with_suffix(".log.1"))
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        os.kill(daemon, signal.SIGHUP)
        wait_for(log.exists, "the reopened log")
        poke.touch()
        wait_for(lambda: _lines(log) == ["next"], "output in the new file")
        assert _lines(log.with_suffix(".log.1")) == ["first"]

    def test_size_rotation(self, harness: Harness) -> None:
        """log_max_bytes: the log is rotated to LOG.1 and stays near the limit."""
        log = harness.root / "a.log"
        script = (
            "i=0; while [ $i -lt 10 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxx; i=$((i+1)); "
            f"sleep 0.01; done; {SLEEP}"
        )
        spec = harness.spec("a", script, stdout_log=str(log), log_max_bytes=60)
        harness.supervisor.start(spec)
        old = log.with_suffix(".log.1")

        def current() -> str:
            # Rotation replaces the file under us: between two looks it may briefly be absent.
            try:
                return log.read_text()
            except FileNotFoundError:
                return ""

        wait_for(lambda: "line-9-" in current(), "last line")
        assert old.exists()
        assert log.stat().st_size <= 60
        assert old.stat().st_size <= 60


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


class TestReadiness:
    def test_file_readiness_becomes_ready(self, harness: Harness) -> None:
        """State is ready once the readiness file appears (wait_ready answers then)."""
        flag = harness.root / "flag"
        spec = harness.spec(
            "a",
            f"sleep 0.05; touch {flag}; {SLEEP}",
            readiness=ReadinessSpec(probe=PathProbe(paths=(str(flag),)), timeout=30),
        )
        status = harness.supervisor.start(spec, wait_ready=True)
        assert status.state == "ready"
        assert flag.exists()

    def test_tcp_readiness(self, harness: Harness) -> None:
        """A tcp check passes once the port accepts connections."""
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            port = listener.getsockname()[1]
            check = ReadinessSpec(probe=TcpProbe(host="127.0.0.1", port=port), timeout=30)
            status = harness.supervisor.start(
                harness.spec("a", SLEEP, readiness=check), wait_ready=True
            )
        assert status.state == "ready"

    def test_http_readiness(self, harness: Harness) -> None:
        """An http check passes once the URL answers 2xx."""
        server = http.server.HTTPServer(("127.0.0.1", 0), _Ok)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}/healthz"
            check = ReadinessSpec(probe=HttpProbe(url=url), timeout=30)
            spec = harness.spec("a", SLEEP, readiness=check)
            assert harness.supervisor.start(spec, wait_ready=True).state == "ready"
        finally:
            server.shutdown()
            server.server_close()
            thread.join()

    def test_not_ready_in_time_stays_running(self, harness: Harness) -> None:
        """A check that never passes leaves the service running with 'not ready after Ns'."""
        check = ReadinessSpec(probe=PathProbe(paths=(str(harness.root / "never"),)), timeout=0.1)
        status = harness.supervisor.start(
            harness.spec("a", SLEEP, readiness=check), wait_ready=True
        )
        assert status.state == "running"
        assert status.reason == f"not ready after 0.1s: {harness.root / 'never'}"

    def test_command_readiness(self, harness: Harness) -> None:
        """A command check passes once the command exits 0."""
        flag = harness.root / "flag"
        check = ReadinessSpec(
            probe=CommandProbe(argv=("/bin/sh", "-c", f"test -e {flag}")), timeout=30
        )
        status = harness.supervisor.start(
            harness.spec("a", f"touch {flag}; {SLEEP}", readiness=check), wait_ready=True
        )
        assert status.state == "ready"

    def test_bad_readiness_is_refused(self, harness: Harness) -> None:
        """A spec with an unknown probe kind is refused with an error naming it."""
        wire = harness.spec("a", SLEEP).to_wire()
        wire["readiness"] = {"probe": {"kind": "bogus"}, "timeout": 1}
        with pytest.raises(SupervisorError, match="bogus"):
            harness.supervisor._request({"op": "start", "spec": wire}, start=True)
        assert harness.supervisor.status(["a"])[0].reason == "not supervised"


class TestProc:
    def test_zombie_is_not_alive(self) -> None:
        """A zombie is never counted alive, nor as a member of its group (openrc#252)."""
        child = subprocess.Popen(["/bin/true"], start_new_session=True)
        try:
            wait_for(lambda: (st := proc_stat(child.pid)) and st.state == "Z", "a zombie")
            assert not is_alive(child.pid)
            assert group_members(child.pid) == []
        finally:
            child.wait()

    def test_start_time_identifies_the_process(self) -> None:
        """is_alive with a wrong start time is False: a reused pid is not our process."""
        st = proc_stat(os.getpid())
        assert st is not None
        assert is_alive(os.getpid(), st.start_ticks)
        assert not is_alive(os.getpid(), st.start_ticks + 1)

    def test_a_command_name_with_spaces_and_parentheses(self, tmp_path: Path) -> None:
        """The command name (field 2) may hold ') (' and spaces: the fields after it still
        parse, read as bytes in one read."""
        odd = tmp_path / "a) b (c"
        shutil.copy("/bin/sleep", odd)
        child = subprocess.Popen([str(odd), "30"])
        try:
            st = wait_for(lambda: proc_stat(child.pid), "the child's stat")
            assert (st.pid, st.ppid) == (child.pid, os.getpid())
            assert st.state in ("R", "S")
            assert is_alive(child.pid, st.start_ticks)
            with open(f"/proc/{child.pid}/stat") as f:
                assert f.read().split()[1] == "(a)"  # the name really holds ')'
        finally:
            child.kill()
            child.wait()
        assert proc_stat(child.pid) is None

    def test_describe_status(self) -> None:
        """Exit statuses read like 'exit 3' and 'signal SIGKILL'."""
        assert describe_status(3) == "exit 3"
        assert describe_status(-9) == "signal SIGKILL"


class TestSpec:
    def test_argv_must_be_absolute(self) -> None:
        """A relative argv[0] is refused with the service name in the message."""
        with pytest.raises(ValueError, match="'a'"):
            ProcessSpec(name="a", argv=("sleep",))

    def test_environment_is_not_in_the_repr_nor_the_state_file(self, harness: Harness) -> None:
        """Secrets in the environment never reach repr() or the state file."""
        spec = harness.spec("a", SLEEP, environment={"TOKEN": "hunter2"})
        assert "hunter2" not in repr(spec)
        harness.supervisor.start(spec)
        assert "hunter2" not in harness.supervisor.state_path.read_text()

    @pytest.mark.parametrize(
        ("change", "named"),
        [
            ({"argv": "/bin/sh -c x"}, "argv"),
            ({"environment": {"A": 1}}, "environment"),
            ({"supervision": {"respawn_delay": float("nan")}}, "respawn_delay"),
            ({"supervision": {"respawn_max": -1}}, "respawn_max"),
            ({"supervision": {"stop_signal": "SIGNOPE"}}, "stop_signal"),
            ({"supervision": {"stop_scope": "cgroup"}}, "stop_scope"),
            ({"supervision": {"delegate": True}}, "delegate"),
            ({"supervision": {"tasks": "infinity"}}, "tasks"),
            ({"supervision": {"open_files": 2}}, "open_files"),
            ({"supervision": {"open_files": "1024"}}, "open_files"),
            ({"supervision": {"bogus": 1}}, "bogus"),
            ({"log_max_bytes": 0}, "log_max_bytes"),
            ({"pidfile": 3}, "pidfile"),
            ({"readiness": {"probe": {"kind": "tcp", "host": "h", "port": 0}}}, "port"),
            ({"readiness": {"probe": {"kind": "paths", "paths": ["/a"]}, "timeout": 0}}, "timeout"),
            ({"colour": "blue"}, "colour"),
            ({"argv": ["/bin/true", "a\0b"]}, "argv"),
            ({"environment": {"A": "x\0y"}}, "environment A"),
            ({"environment": {"A=B": "x"}}, "'A=B'"),
            ({"environment": {"": "x"}}, "environment has the name ''"),
        ],
    )
    def test_from_wire_names_the_bad_field(self, change: dict[str, object], named: str) -> None:
        """The daemon decodes a spec once; a bad field is refused by name, not used later."""
        wire = ProcessSpec(name="a", argv=("/bin/true",)).to_wire()
        wire.update(change)
        with pytest.raises(ValueError, match=named):
            ProcessSpec.from_wire(wire)

    def test_a_value_that_cannot_be_passed_is_refused_by_name(self) -> None:
        """A start whose environment holds a NUL is refused naming the variable (not "bad start
        request: ValueError: embedded null byte" from the spawn), its value never shown."""
        wire = ProcessSpec(name="a", argv=("/bin/true",), environment={"A": "1"}).to_wire()
        wire["environment"] = {"A": "1", "TOKEN": "hunter\0two"}
        with pytest.raises(ValueError, match="environment TOKEN") as excinfo:
            ProcessSpec.from_wire(wire)
        assert "hunter" not in str(excinfo.value)

    def test_wire_round_trip(self) -> None:
        """to_wire and from_wire agree on every field."""
        spec = ProcessSpec(
            name="a",
            argv=("/bin/true", "x"),
            environment={"A": "1"},
            pidfile="/p",
            stdout_log="/l",
            log_max_bytes=10,
            readiness=ReadinessSpec(probe=TcpProbe(host="h", port=1), timeout=2),
            fingerprint="f",
        )
        assert ProcessSpec.from_wire(spec.to_wire()) == spec


class TestTheStartLock:
    def test_a_directory_in_its_place_is_named_with_the_fix(self, harness: Harness) -> None:
        """Something else at run/noderole/starter.lock: every start failed with a bare
        IsADirectoryError; the refusal names the file and what to do."""
        harness.run_dir.mkdir(parents=True, mode=0o700)
        (harness.run_dir / _protocol.STARTER_LOCK_NAME).mkdir()
        with pytest.raises(
            SupervisorError,
            match=r"start lock .*: Is a directory; remove what is there, then run again",
        ):
            harness.supervisor.start(harness.spec("a", SLEEP))
