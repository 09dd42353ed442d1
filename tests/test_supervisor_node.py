"""One supervisor per node, whatever happens to its files, and one that answers or says it cannot.

Real daemons, real processes, real signals; every process is ended by the harness (by pid).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from noderole.records import Service
from noderole.root import NodeRoot
from noderole.supervisor import NotAnswering, ProcessSpec, SupervisionSpec, Supervisor
from noderole.supervisor._proc import is_alive
from noderole.supervisor._record import replace
from tests.supervisor_fixtures import MARK, Harness, close_harness, harness, wait_for

__all__ = ["harness"]  # the fixture, imported for pytest

SLEEP = "exec sleep 1000"


def _sleep_spec(harness: Harness, name: str, pidfile: Path) -> ProcessSpec:
    """``/bin/sleep 1000`` itself (no shell), with a pidfile and the test's marker."""
    return ProcessSpec(
        name=name,
        argv=("/bin/sleep", "1000"),
        environment={"PATH": "/usr/bin:/bin", MARK: harness.mark},
        supervision=SupervisionSpec(respawn_delay=0.05, stop_timeout=2),
        pidfile=str(pidfile),
        fingerprint="f1",
    )


@contextlib.contextmanager
def _stranger(harness: Harness, *, own_session: bool = False) -> Iterator[int]:
    """A running ``/bin/sh`` that is no service's: its pid, ended (by pid) on the way out.

    It waits on a builtin ``read`` (no child of its own); ``own_session``: it leads a session,
    as a program started by systemd or a login does.
    """
    process = subprocess.Popen(
        ["/bin/sh", "-c", "read line"], stdin=subprocess.PIPE, start_new_session=own_session
    )
    harness.extra_pids.append(process.pid)
    try:
        yield process.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
        assert process.stdin is not None
        process.stdin.close()


def _rewrites_pidfile(pidfile: Path, content: str) -> str:
    """A service script that waits for the supervisor to write its pid into ``pidfile``, then
    writes ``content`` there instead (as some programs write their own pidfile), and sleeps."""
    path = shlex.quote(str(pidfile))
    return (
        f'while [ "$(cat {path} 2>/dev/null)" != "$$" ]; do sleep 0.01; done; '
        f"echo {shlex.quote(content)} > {path}; {SLEEP}"
    )


def _pidfile_holds(pidfile: Path, content: str) -> bool:
    try:
        return pidfile.read_text().strip() == content
    except FileNotFoundError:
        return False


@pytest.mark.timeout(90)
class TestOneDaemonPerNode:
    def test_removed_run_dir_gets_no_second_daemon(self, harness: Harness) -> None:
        """rm -rf of the run dir under a live daemon, then start: the same daemon answers."""
        first = harness.supervisor.start(harness.spec("a", SLEEP))
        [daemon] = harness.daemons()
        shutil.rmtree(harness.run_dir)
        again = Supervisor(harness.run_dir, timeout=30).start(harness.spec("a", SLEEP))
        assert again.already_running
        assert again.pid == first.pid
        assert harness.daemons() == [daemon]
        assert harness.settled_marked([first.pid or 0]) == [first.pid]
        # The daemon writes its files again where clients and the watchdog look for them.
        wait_for(lambda: (harness.run_dir / "supervisor.sock").exists(), "the socket again")
        wait_for(lambda: (harness.run_dir / "state.json").exists(), "the state file again")
        assert (harness.run_dir / "supervisor.pid").read_text().split() == [str(daemon)]
        assert harness.run_dir.stat().st_mode & 0o777 == 0o700

    def test_stop_after_removed_run_dir_leaves_no_copy(self, harness: Harness) -> None:
        """stop reports success only once the one copy is gone (no orphaned old daemon)."""
        first = harness.supervisor.start(harness.spec("a", SLEEP))
        shutil.rmtree(harness.run_dir)
        [stopped] = Supervisor(harness.run_dir, timeout=30).stop(["a"])
        assert stopped.state == "stopped"
        assert first.pid is not None
        assert not is_alive(first.pid)
        assert harness.settled_marked([]) == []

    def test_a_second_daemon_refuses_to_start(self, harness: Harness) -> None:
        """A daemon started by hand on a served node exits at once, naming the live one."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        [daemon] = harness.daemons()
        shutil.rmtree(harness.run_dir)
        harness.run_dir.mkdir(parents=True)
        r, w = os.pipe()
        package_parent = str(Path(__file__).resolve().parent.parent)
        from noderole.supervisor._client import _LAUNCH

        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    _LAUNCH,
                    package_parent,
                    str(harness.run_dir),
                    str(w),
                ],
                pass_fds=(w,),
                timeout=60,
                capture_output=True,
            )
            os.close(w)
            w = -1
            message = os.read(r, 4096).decode()
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
        assert done.returncode == 0  # the session leader; the daemon reports through the pipe
        assert message.startswith("another supervisor serves this node root")
        assert f"pid {daemon}" in message
        wait_for(lambda: harness.daemons() == [daemon], "the refused daemon to exit")


@pytest.mark.timeout(90)
class TestPidfileOfAnother:
    def test_running_process_named_by_the_pidfile_is_not_duplicated(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        """Both supervisors killed, state lost: the next start refuses, naming the pid."""
        pidfile = tmp_path / "a.pid"
        spec = _sleep_spec(harness, "a", pidfile)
        first = harness.supervisor.start(spec)
        assert first.pid is not None
        [daemon], [watchdog] = harness.daemons(), harness.watchdogs()
        harness.extra_pids.append(first.pid)
        # The watchdog first, so it cannot end the service; the daemon stopped meanwhile, so it
        # cannot fork a replacement watchdog between the two kills.
        os.kill(daemon, signal.SIGSTOP)
        os.kill(watchdog, signal.SIGKILL)
        os.kill(daemon, signal.SIGKILL)
        wait_for(lambda: not harness.daemons() and not harness.watchdogs(), "both to be gone")
        (harness.run_dir / "state.json").unlink()
        assert is_alive(first.pid)
        status = harness.supervisor.start(spec)
        assert status.state == "crashed"
        assert f"pidfile {pidfile} names pid {first.pid}" in status.reason
        assert "did not start" in status.reason
        assert f"stop pid {first.pid}, or remove {pidfile} if it is no copy of a" in status.reason
        assert harness.settled_marked([first.pid]) == [first.pid]  # no second copy
        assert pidfile.read_text().split() == [str(first.pid)]
        [reported] = harness.supervisor.status(["a"])
        assert reported.state == "crashed"
        assert str(first.pid) in reported.reason
        # Once that process is gone, the service starts.
        os.kill(first.pid, signal.SIGKILL)
        wait_for(lambda: not is_alive(first.pid or 0), "the orphan to be gone")
        assert harness.supervisor.start(spec).state == "running"

    def test_pidfile_naming_another_program_is_replaced(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        """A pid reused by another program (here: this test) is a stale pidfile, not a refusal."""
        pidfile = tmp_path / "a.pid"
        pidfile.write_text(f"{os.getpid()}\n")
        status = harness.supervisor.start(_sleep_spec(harness, "a", pidfile))
        assert status.state == "running"
        assert pidfile.read_text().split() == [str(status.pid)]

    def test_pidfile_naming_a_process_in_no_session_of_its_own_is_replaced(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        """A pidfile naming a running ``sh`` that leads no session of its own, for a ``/bin/sh``
        service this daemon never ran: no killed supervisor left it (every service a supervisor
        starts leads its own session), so the pidfile is stale and replaced, the stranger left
        alone. Before, any running process of the same executable was taken for a leftover:
        the start was refused, telling the operator to kill it."""
        pidfile = tmp_path / "svc.pid"
        with _stranger(harness) as stranger:
            pidfile.write_text(f"{stranger}\n")
            status = harness.supervisor.start(harness.spec("svc", SLEEP, pidfile=str(pidfile)))
            assert status.state == "running", status.reason
            assert pidfile.read_text().split() == [str(status.pid)]
            assert is_alive(stranger)
            log = harness.supervisor.log_path.read_text()
            assert f"svc: stale pidfile {pidfile} names {stranger}, a running process" in log
            assert "leads no session of its own" in log

    def test_a_service_that_wrote_a_strangers_pid_restarts(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        """The reproduction: a ``/bin/sh`` service overwrites its pidfile with the pid of an
        unrelated running ``sh``; ``restart`` stops it and starts it again, and the stranger
        runs on. Before, the old process was stopped and the new start refused (``crashed``:
        ``refusing to start: its pidfile ... names pid N, a running sh that this supervisor did
        not start``): the service stayed down."""
        pidfile = tmp_path / "svc.pid"
        with _stranger(harness) as stranger:
            spec = harness.spec(
                "svc", _rewrites_pidfile(pidfile, str(stranger)), pidfile=str(pidfile)
            )
            first = harness.supervisor.start(spec)
            wait_for(lambda: _pidfile_holds(pidfile, str(stranger)), "the stranger's pid written")
            again = harness.supervisor.restart(spec)
            assert again.state == "running", again.reason
            assert again.pid not in (None, first.pid)
            assert first.pid is not None
            assert not is_alive(first.pid)
            assert is_alive(stranger)
            # The next start (an apply of the same definition) finds it running.
            assert harness.supervisor.start(spec).already_running

    def test_a_service_this_supervisor_ran_before_is_not_refused(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        """The daemon's own record wins over any guess: it ran ``svc`` itself (a killed
        supervisor's copy would have been refused at that first start), so a pidfile naming
        another process after its stop, even a session leader of the same program, is stale.
        Before, that start was refused."""
        pidfile = tmp_path / "svc.pid"
        harness.supervisor.start(harness.spec("keeper", SLEEP))  # keeps this daemon serving
        spec = harness.spec("svc", SLEEP, pidfile=str(pidfile))
        with _stranger(harness, own_session=True) as stranger:
            harness.supervisor.start(spec)
            [daemon] = harness.daemons()
            assert harness.supervisor.stop(["svc"])[0].state == "stopped"
            pidfile.write_text(f"{stranger}\n")
            status = harness.supervisor.start(spec)
            assert status.state == "running", status.reason
            assert harness.daemons() == [daemon]
            assert pidfile.read_text().split() == [str(status.pid)]
            assert is_alive(stranger)

    def test_stop_removes_a_pidfile_naming_another_process(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        """A service that wrote another process's pid into its pidfile is stopped: the pidfile
        goes with it (left, it would lead a ``kill $(cat PIDFILE)`` to the stranger), and the
        supervisor's log says which pid it named. Before, it was left naming the stranger."""
        pidfile = tmp_path / "svc.pid"
        with _stranger(harness) as stranger:
            spec = harness.spec(
                "svc", _rewrites_pidfile(pidfile, str(stranger)), pidfile=str(pidfile)
            )
            started = harness.supervisor.start(spec)
            wait_for(lambda: _pidfile_holds(pidfile, str(stranger)), "the stranger's pid written")
            assert harness.supervisor.stop(["svc"])[0].state == "stopped"
            assert not pidfile.exists()
            assert is_alive(stranger)
            log = harness.supervisor.log_path.read_text()
            assert (
                f"svc: pidfile {pidfile} named pid {stranger}, not the service's pid "
                f"{started.pid}: removed it" in log
            )

    def test_stop_leaves_a_file_that_holds_no_pid_and_says_so(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        """What the service put at its pidfile's name that holds no pid is no pidfile: the stop
        leaves it, and says so. Before, it was left without a word."""
        pidfile = tmp_path / "svc.pid"
        spec = harness.spec("svc", _rewrites_pidfile(pidfile, "not a pid"), pidfile=str(pidfile))
        harness.supervisor.start(spec)
        wait_for(lambda: _pidfile_holds(pidfile, "not a pid"), "the service's text written")
        assert harness.supervisor.stop(["svc"])[0].state == "stopped"
        assert pidfile.read_text() == "not a pid\n"
        log = harness.supervisor.log_path.read_text()
        assert f"svc: pidfile {pidfile} holds no pid: left it" in log


@pytest.mark.timeout(90)
class TestHungDaemon:
    def test_status_answers_from_the_state_and_says_so(self, harness: Harness) -> None:
        """A SIGSTOPped daemon: status answers from the recorded state, naming the daemon."""
        started = harness.supervisor.start(harness.spec("a", SLEEP))
        [daemon] = harness.daemons()
        warnings: list[str] = []
        client = Supervisor(harness.run_dir, timeout=300, warn=warnings.append)
        os.kill(daemon, signal.SIGSTOP)
        try:
            [status] = client.status(["a"])
        finally:
            os.kill(daemon, signal.SIGCONT)
        assert (status.state, status.pid) == ("running", started.pid)
        assert f"supervisor (pid {daemon})" in status.reason
        assert "not answering" in status.reason
        assert [w for w in warnings if "not answering" in w and f"kill -CONT {daemon}" in w]

    def test_status_looks_up_each_process_when_the_daemon_is_stopped(
        self, harness: Harness
    ) -> None:
        """A SIGSTOPped daemon, and b's process killed meanwhile (a zombie: the stopped daemon
        cannot reap it, nor respawn b): status shows b crashed, its process gone, and a
        running, each saying the daemon is not answering. Before, b was shown running with the
        dead pid, as last recorded."""
        a = harness.supervisor.start(harness.spec("a", SLEEP))
        b = harness.supervisor.start(harness.spec("b", SLEEP))
        assert a.pid is not None
        assert b.pid is not None
        [daemon] = harness.daemons()
        warnings: list[str] = []
        client = Supervisor(harness.run_dir, timeout=300, warn=warnings.append)
        os.kill(daemon, signal.SIGSTOP)
        try:
            os.kill(b.pid, signal.SIGKILL)
            wait_for(lambda: not is_alive(b.pid or 0), "b's process to end")
            statuses = {s.name: s for s in client.status(["a", "b"])}
        finally:
            os.kill(daemon, signal.SIGCONT)
        assert (statuses["a"].state, statuses["a"].pid) == ("running", a.pid)
        assert "its process runs, unsupervised" in statuses["a"].reason
        assert (statuses["b"].state, statuses["b"].pid) == ("crashed", None)
        assert statuses["b"].reason.startswith(f"its process {b.pid} is gone, and nothing")
        for status in statuses.values():
            assert f"supervisor (pid {daemon}) is not answering" in status.reason
        assert client.hung is not None
        assert len(warnings) == 1
        assert f"kill -CONT {daemon}" in warnings[0]
        assert f"kill -9 {daemon}" in warnings[0]

    def test_start_fails_fast_naming_the_daemon(self, harness: Harness) -> None:
        """A SIGSTOPped daemon: start raises NotAnswering after the hello timeout, not 300 s."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        [daemon] = harness.daemons()
        client = Supervisor(harness.run_dir, timeout=300)
        os.kill(daemon, signal.SIGSTOP)
        try:
            with pytest.raises(NotAnswering, match=f"pid {daemon}.*not answering"):
                client.start(harness.spec("b", SLEEP))
        finally:
            os.kill(daemon, signal.SIGCONT)
        # Resumed, the daemon drops the request its client gave up on: nothing starts late.
        [b] = harness.supervisor.status(["b"])
        assert b.reason == "not supervised"
        assert harness.daemons() == [daemon]  # and no second daemon was started beside it

    def test_native_backend_fails_every_start_once_it_knows(self, tmp_path: Path) -> None:
        """Native backend: once a status finds the daemon hung, starts fail fast until resumed."""
        from noderole.backends.native import NativeBackend
        from noderole.errors import BackendError
        from noderole.testing import end_node_processes

        program = tmp_path / "bin/sleep"
        program.parent.mkdir(parents=True)
        shutil.copy2("/bin/sleep", program)
        backend = NativeBackend(NodeRoot(tmp_path))
        survivors: list[int] = []
        try:
            backend.start(Service(name="a", command=["/bin/sleep", "1000"]), fingerprint="x")
            daemon = backend.supervisor.daemon_pid()
            assert daemon is not None
            os.kill(daemon, signal.SIGSTOP)
            try:
                hung = NativeBackend(NodeRoot(tmp_path))
                statuses = hung.status(["a"])
                assert "not answering" in statuses["a"].reason
                for name in ("b", "c"):
                    with pytest.raises(BackendError, match="not answering"):
                        hung.start(Service(name=name, command=["/bin/sleep", "1"]), fingerprint="")
            finally:
                os.kill(daemon, signal.SIGCONT)
            # Resumed: the next status gets an answer, and starts work again.
            assert "not answering" not in hung.status(["a"])["a"].reason
            again = hung.start(Service(name="b", command=["/bin/sleep", "1000"]), fingerprint="")
            assert again.state == "running"
        finally:
            survivors = end_node_processes(tmp_path)
        assert survivors == []


_SLOW_DAEMON = """
import json, os, socket, sys, time
sock = socket.socket(socket.AF_UNIX)
sock.bind(sys.argv[1])
sock.listen(8)
print("listening", flush=True)
conn, _ = sock.accept()
conn.recv(65536)
if sys.argv[2] == "sleep":
    time.sleep(3.0)
end = time.monotonic() + 3.0
while sys.argv[2] == "spin" and time.monotonic() < end:
    pass
answer = {"v": 2, "ok": True, "pid": os.getpid()}
conn.sendall(b'{"v": 2, "accepted": true}\\n' + json.dumps(answer).encode() + b"\\n")
conn.close()
"""


@pytest.mark.timeout(90)
class TestBusyIsNotHung:
    @pytest.mark.parametrize("how", ["spin", "sleep"])
    def test_a_daemon_using_the_cpu_is_waited_for(self, tmp_path: Path, how: str) -> None:
        """No hello within 2 s: a daemon busy on the CPU is waited for; an idle one is not."""
        run_dir = tmp_path / "run/noderole"
        run_dir.mkdir(parents=True)
        fake = subprocess.Popen(
            [sys.executable, "-c", _SLOW_DAEMON, str(run_dir / "supervisor.sock"), how],
            stdout=subprocess.PIPE,
        )
        try:
            assert fake.stdout is not None
            assert fake.stdout.readline() == b"listening\n"
            client = Supervisor(run_dir, timeout=60)
            if how == "spin":
                assert client.daemon_pid() == fake.pid
            else:
                with pytest.raises(NotAnswering, match=f"pid {fake.pid}"):
                    client.daemon_pid()
        finally:
            fake.kill()
            fake.wait()
            if fake.stdout is not None:
                fake.stdout.close()


@pytest.mark.timeout(90)
class TestNodeRootRemoved:
    @pytest.mark.parametrize("made_again", [False, True], ids=["removed", "made-again"])
    def test_daemon_stops_its_services_and_exits(self, tmp_path: Path, made_again: bool) -> None:
        """A scratch root removed (or made again) under a live daemon: services end, it exits."""
        root = tmp_path / "node"
        (root / "bin").mkdir(parents=True)
        program = root / "bin" / "svc"
        program.write_text("#!/bin/sh\nexec sleep 1000\n")
        program.chmod(0o755)
        log_path = tmp_path / "supervisor.log"  # outside the root: it must outlive it
        h = Harness(
            root=root,
            supervisor=Supervisor(root / "run" / "noderole", log_path=log_path, timeout=30),
        )
        try:
            started = h.supervisor.start(h.spec("a", f"exec {program}"))
            assert started.state == "running"
            assert len(h.daemons()) == 1
            shutil.rmtree(root)
            if made_again:
                root.mkdir()
            wait_for(lambda: not h.daemons() and not h.watchdogs(), "the daemon to exit")
            assert h.settled_marked([]) == []  # its service was stopped, not left to run on
            assert not (root / "run").exists()  # the removed root was not made again
            text = log_path.read_text()
            assert f"the node root {root} was removed or replaced" in text
            assert "stopping every service and exiting" in text
        finally:
            close_harness(h)

    def test_a_crash_after_the_root_is_gone_is_not_respawned(self, tmp_path: Path) -> None:
        """Its service killed after the root moved away: no respawn writes under the old path."""
        root = tmp_path / "node"
        root.mkdir()
        log_path = tmp_path / "supervisor.log"
        h = Harness(
            root=root,
            supervisor=Supervisor(root / "run" / "noderole", log_path=log_path, timeout=30),
        )
        try:
            spec = _sleep_spec(h, "a", root / "run" / "a.pid")
            spec = replace(spec, stdout_log=str(root / "var" / "log" / "a.log"))
            started = h.supervisor.start(spec)
            assert started.pid is not None
            # Moved away first (one rename: the daemon never sees a half-removed root), then
            # the service dies: its respawn would write its pidfile and log under ``root``.
            root.rename(tmp_path / "gone")
            os.kill(started.pid, signal.SIGKILL)
            wait_for(lambda: not h.daemons() and not h.watchdogs(), "the daemon to exit")
            assert not root.exists()
            assert "stopping every service and exiting" in log_path.read_text()
            assert h.settled_marked([]) == []
        finally:
            close_harness(h)


class TestADaemonWithAnOwner:
    """``Supervisor(owner=PID)``: the daemon it starts ends with that process (a rehearsal's),
    however it ends, SIGKILL included."""

    @pytest.mark.parametrize("prepared", [False, True], ids=["spawned", "standby"])
    def test_its_services_and_itself_end_with_the_owner(
        self, harness: Harness, prepared: bool
    ) -> None:
        """The owner SIGKILLed: the daemon stops every service (its whole group) and exits,
        saying why; nothing of the node is left. Before, a rehearsal killed this way left its
        supervisor and services running for good."""
        from noderole.testing import eventually, supervisor_processes

        owner = subprocess.Popen(["sleep", "1000"])
        harness.extra_pids.append(owner.pid)
        supervisor = Supervisor(harness.run_dir, owner=owner.pid)
        if prepared:
            supervisor.prepare()
        started = supervisor.start(harness.spec("a", SLEEP))
        assert started.state == "running"
        assert supervisor_processes(harness.root)[0]
        owner.kill()
        owner.wait()
        eventually(lambda: supervisor_processes(harness.root) == ([], []), "the daemon to exit")
        eventually(lambda: not harness.marked(), "the service to be stopped")
        log = supervisor.log_path.read_text()
        assert f"pid {owner.pid}, which this supervisor serves, is gone" in log

    def test_an_owner_gone_before_the_daemon_looks_ends_it_at_once(self, harness: Harness) -> None:
        """An owner that no longer exists when the daemon starts (a pid reaped meanwhile):
        nothing to serve, the daemon exits."""
        from noderole.testing import eventually, supervisor_processes

        gone = subprocess.Popen(["true"])
        gone.wait()
        Supervisor(harness.run_dir, owner=gone.pid).ensure_running()
        eventually(lambda: supervisor_processes(harness.root) == ([], []), "the daemon to exit")
        assert "which this supervisor serves, is gone" in harness.supervisor.log_path.read_text()


class TestClose:
    def test_close_ends_the_leftovers_of_a_killed_daemon(self, harness: Harness) -> None:
        """Daemon and watchdog both SIGKILLed, a service left running: close() (a rehearsal's
        clean-up) still starts the one daemon that ends the leftovers, then shuts it down;
        only other starts are refused after it. Found reviewing close(): it refused that start
        too, raised, and left the service running and the scratch root in place."""
        from noderole.supervisor import SupervisorError
        from noderole.testing import supervisor_processes

        started = harness.supervisor.start(harness.spec("a", SLEEP))
        assert started.pid is not None
        daemons, watchdogs = supervisor_processes(harness.root)
        # The daemon stopped first: between the two kills it would start another watchdog for
        # the one killed (it does, at once), and that one would end the service when the
        # daemon dies (a CI run on a loaded machine lost that race).
        for pid in daemons:
            os.kill(pid, signal.SIGSTOP)
        for pid in [*watchdogs, *daemons]:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: supervisor_processes(harness.root) == ([], []), "both to be gone")
        assert is_alive(started.pid)
        harness.supervisor.close()
        assert harness.marked() == []
        assert supervisor_processes(harness.root) == ([], [])
        with pytest.raises(SupervisorError, match="was shut down"):
            harness.supervisor.start(harness.spec("b", SLEEP))
