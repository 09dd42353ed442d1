"""Hardening of the root supervisor and of apply (issue 12: parts 1, 2, 5 (full disk) and 7).

A real unprivileged user, made for the test with ``useradd`` (unique name, removed at the end even
on failure), plants symbolic links, a hard link and a FIFO where a service of his writes its log
and pidfile, at each moment the supervisor (root) opens them: before the start, between two
respawns, before a SIGHUP reopen and before a size rotation. Root's files must stay byte for
byte, the daemon must live on, the service must keep running, and nothing may be left behind.

The run directory and everything in it is private to root; a full ``/run`` (a real tmpfs in a
private mount namespace) gives clear errors and never an orphan.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from noderole.clock import SystemClock
from noderole.errors import LockedError
from noderole.paths import LOCK_FILE
from noderole.records import Supervision
from noderole.root import NodeRoot
from noderole.state import StateError, node_lock
from noderole.supervisor import Supervisor, SupervisorError, _log, _safeopen
from noderole.supervisor._status import ServiceStatus
from tests.hostile_fixtures import TICK, Scene, scene, user
from tests.supervisor_fixtures import Harness, close_harness, wait_for

__all__ = ["scene", "user"]  # the fixtures, used by name


def _status(scene: Scene, name: str = "a") -> ServiceStatus:
    return scene.harness.supervisor.status([name])[0]


# ---------------------------------------------------------------------------- part 1


class TestPlantedLinks:
    def test_before_start(self, scene: Scene) -> None:
        """Links at the log and pidfile, a FIFO in the way: refused, the service runs anyway."""
        victim = scene.victim("victim")
        scene.plant("ln", "-s", str(victim), str(scene.svc / "svc.log"))
        scene.plant("ln", "-s", str(victim), str(scene.svc / "svc.pid"))
        status = scene.harness.supervisor.start(scene.spec("a", TICK))
        assert status.state == "running"
        wait_for(lambda: scene.said("svc.log: it is a symbolic link"), "the refusal in the log")
        # The pidfile's link was replaced by the rename, never written through.
        pidfile = scene.svc / "svc.pid"
        assert not pidfile.is_symlink()
        assert pidfile.read_text().strip() == str(status.pid)
        assert (scene.svc / "svc.log").is_symlink()
        assert scene.intact()
        assert scene.daemon_alive()
        assert _status(scene).state == "running"

    def test_fifo_at_the_pidfile_does_not_hang_the_daemon(self, scene: Scene) -> None:
        """A FIFO planted at the pidfile is not waited on: the start answers, the file replaced."""
        scene.plant("mkfifo", str(scene.svc / "svc.pid"))
        status = scene.harness.supervisor.start(scene.spec("a", TICK))
        assert status.state == "running"
        assert (scene.svc / "svc.pid").read_text().strip() == str(status.pid)

    def test_between_respawns(self, scene: Scene) -> None:
        """A crash-looping service: a link, then a hard link, planted between two respawns."""
        victim = scene.victim("victim")
        shared = scene.victim("shared", mode=0o666)  # a root file the user may hard-link
        sup = Supervision(respawn_delay=0.05, stop_timeout=2)
        scene.harness.supervisor.start(scene.spec("a", "echo run; exit 1", supervision=sup))
        log = scene.svc / "svc.log"
        wait_for(lambda: log.exists() and b"run" in log.read_bytes(), "the first run's output")
        scene.plant("rm", "-f", str(log))
        scene.plant("ln", "-s", str(victim), str(log))
        scene.plant("rm", "-f", str(scene.svc / "svc.pid"))
        scene.plant("ln", "-s", str(victim), str(scene.svc / "svc.pid"))
        wait_for(lambda: scene.said("svc.log: it is a symbolic link"), "the link refused")
        before = _status(scene).restarts
        wait_for(lambda: _status(scene).restarts >= before + 3, "respawns going on")
        scene.plant("rm", "-f", str(log))
        scene.plant("ln", str(shared), str(log))
        wait_for(lambda: scene.said("hard links"), "the hard link refused")
        before = _status(scene).restarts
        wait_for(lambda: _status(scene).restarts >= before + 3, "respawns going on")
        assert scene.intact()
        assert scene.daemon_alive()

    def test_before_sighup_reopen(self, scene: Scene) -> None:
        """The log swapped for a link, then SIGHUP: refused, output goes on to the old file."""
        victim = scene.victim("victim")
        scene.harness.supervisor.start(scene.spec("a", TICK))
        log, old = scene.svc / "svc.log", scene.svc / "svc.old"
        wait_for(lambda: log.exists() and b"tick" in log.read_bytes(), "output in the log")
        assert log.stat().st_uid == scene.user.uid  # opened with the user's rights
        scene.plant("mv", str(log), str(old))
        scene.plant("ln", "-s", str(victim), str(log))
        daemon = scene.harness.supervisor.daemon_pid()
        assert daemon is not None
        os.kill(daemon, signal.SIGHUP)
        wait_for(lambda: scene.said("cannot reopen"), "the reopen refused")
        size = old.stat().st_size
        wait_for(lambda: old.stat().st_size > size, "output still reaching the old file")
        assert scene.intact()
        assert scene.daemon_alive()
        assert _status(scene).state == "running"

    def test_before_size_rotation(self, scene: Scene) -> None:
        """Links at LOG.1 and at LOG before rotations: moved by the renames, never followed.

        (A regression guard: the rename-then-reopen order kept this moment safe before too.)
        """
        victim = scene.victim("victim")
        log, rotated = scene.svc / "svc.log", scene.svc / "svc.log.1"
        scene.plant("ln", "-s", str(victim), str(rotated))
        scene.harness.supervisor.start(scene.spec("a", TICK, log_max_bytes=200))
        wait_for(lambda: not rotated.is_symlink() and rotated.exists(), "a first rotation")
        scene.plant("ln", "-sf", str(victim), str(log))
        wait_for(
            lambda: log.exists() and not log.is_symlink() and b"tick" in log.read_bytes(),
            "a rotation that moved the link away and made a new log",
        )
        assert scene.intact()
        assert scene.daemon_alive()
        assert _status(scene).state == "running"

    def test_link_in_place_of_the_log_directory(self, scene: Scene) -> None:
        """The user turns his log directory into a link to root's: refused, the service runs."""
        (scene.base / "rootdir").mkdir()
        victim = scene.victim("rootdir/svc.log")
        # base is root's: give the user a directory of his own to play in.
        mine = scene.base / "mine"
        mine.mkdir()
        os.chown(mine, scene.user.uid, scene.user.gid)
        scene.plant("ln", "-s", str(victim.parent), str(mine / "svc"))
        spec = scene.harness.spec(
            "a", TICK, user=scene.user.name, stdout_log=str(mine / "svc/svc.log")
        )
        assert scene.harness.supervisor.start(spec).state == "running"
        wait_for(lambda: scene.said("refusing to follow the symbolic link"), "the refusal")
        assert scene.intact()
        assert scene.daemon_alive()


# ---------------------------------------------------------------------------- part 2


class TestStatusLogTail:
    """``status`` shows a failing service's last log lines, read by root from a file in a
    directory the service's user owns: the user must not turn that read onto root's files, nor
    hang it."""

    SECRET = "root-only: the line the service's user must never see\n"

    def _tail(self, scene: Scene) -> list[str]:
        """What status would show for a service logging to the user's ``svc.log``, read in a
        thread so that a read that blocks fails the test instead of hanging it."""
        from noderole.operations import _log_tail

        found: list[list[str]] = []
        reader = threading.Thread(
            target=lambda: found.append(_log_tail(str(scene.svc / "svc.log"), 5, [])),
            daemon=True,
        )
        reader.start()
        reader.join(10)
        if reader.is_alive():  # blocked opening a FIFO: a writer releases it, then fail
            fd = os.open(scene.svc / "svc.log", os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
            reader.join(10)
            pytest.fail("reading the log tail blocked on a FIFO the service's user planted")
        return found[0]

    def _victim(self, scene: Scene) -> Path:
        victim = scene.base / "shadow"
        victim.write_text("root:$6$hash:19000::::::\n" + self.SECRET)
        victim.chmod(0o600)
        return victim

    def test_the_users_own_log_is_shown(self, scene: Scene) -> None:
        """The control: a log the user wrote himself is shown, last lines first to last."""
        scene.plant("sh", "-c", f"printf 'one\\ntwo\\n' > {scene.svc / 'svc.log'}")
        assert self._tail(scene) == ["one", "two"]

    def test_a_symbolic_link_is_not_read_through(self, scene: Scene) -> None:
        """A link the user planted at his log, to a file only root can read: status says it
        does not follow it, and shows nothing of the file."""
        victim = self._victim(scene)
        scene.plant("ln", "-s", str(victim), str(scene.svc / "svc.log"))
        shown = self._tail(scene)
        assert not any("root-only" in line or "hash" in line for line in shown)
        assert shown == [
            f"(log not shown: refusing to read {scene.svc / 'svc.log'}: it is a symbolic link; "
            "remove it)"
        ]

    def test_a_fifo_does_not_hang_status(self, scene: Scene) -> None:
        """A FIFO in place of the log (swapped in after status saw a file): the read returns
        at once, saying what it found."""
        scene.plant("mkfifo", str(scene.svc / "svc.log"))
        assert self._tail(scene) == [
            f"(log not shown: refusing to read {scene.svc / 'svc.log'}: it is not a regular "
            "file; remove it)"
        ]

    def test_a_hard_link_to_roots_file_is_not_read(self, scene: Scene) -> None:
        """With fs.protected_hardlinks=0 the user can link a root-owned file into his
        directory (made here by root, as the user could there): not shown either."""
        victim = self._victim(scene)
        os.link(victim, scene.svc / "svc.log")
        shown = self._tail(scene)
        assert not any("root-only" in line or "hash" in line for line in shown)
        assert len(shown) == 1
        assert shown[0].startswith(f"(log not shown: refusing to read {scene.svc / 'svc.log'}: ")
        assert "2 hard links" in shown[0]

    def test_a_link_in_place_of_the_log_directory_is_not_followed(self, scene: Scene) -> None:
        """The user replaces a directory of his by a link to a root-only one."""
        private = scene.base / "private"
        private.mkdir(mode=0o700)
        (private / "svc.log").write_text(self.SECRET)
        (scene.svc / "logs").mkdir()
        os.chown(scene.svc / "logs", scene.user.uid, scene.user.gid)
        scene.plant("rmdir", str(scene.svc / "logs"))
        scene.plant("ln", "-s", str(private), str(scene.svc / "logs"))
        from noderole.operations import _log_tail

        shown = _log_tail(str(scene.svc / "logs/svc.log"), 5, [])
        assert not any("root-only" in line for line in shown)
        assert len(shown) == 1
        assert "refusing to follow the symbolic link" in shown[0]


class TestResetPurge:
    """``reset --purge`` removes, as root, the logs noderole recorded, some of them in a
    directory the service's user owns. A subdirectory he swaps for a link (at any time before
    the removal, after reset looked at the file too) must not turn root's unlink onto the file
    of the same name in the directory the link points to."""

    PATH = "/var/log/svc/app/svc.log"

    def _node(self, scene: Scene) -> tuple[NodeRoot, Path]:
        """A node whose recorded log is in the user's ``/var/log/svc/app``; his log directory."""
        from noderole.manifest import record

        logs = scene.harness.root / "var/log/svc"
        (logs / "app").mkdir(parents=True)
        (logs / "app/svc.log").write_text("the service's log\n")
        for mine in (logs, logs / "app", logs / "app/svc.log"):
            os.chown(mine, scene.user.uid, scene.user.gid)
        root = NodeRoot(scene.harness.root)
        record(root, "log", [self.PATH])
        return root, logs

    def _purge(self, root: NodeRoot) -> Any:
        from noderole.reset import reset

        def no_role(role: str) -> Any:  # no role is recorded: nothing is planned or stopped
            raise AssertionError(role)

        return reset(None, None, purge=True, root=root, clock=SystemClock(), plan_for=no_role)

    def test_a_directory_swapped_for_a_link_is_not_followed(self, scene: Scene) -> None:
        from noderole.manifest import entries

        root, logs = self._node(scene)
        (scene.base / "rootdir").mkdir()
        victim = scene.victim("rootdir/svc.log")
        scene.plant("mv", str(logs / "app"), str(logs / "app.old"))
        scene.plant("ln", "-s", str(victim.parent), str(logs / "app"))
        report = self._purge(root)
        assert scene.intact()
        kept = {r.path: r.reason for r in report.kept}
        assert "refusing to follow the symbolic link" in kept[self.PATH], kept
        assert f"{logs}/app" in kept[self.PATH]
        assert self.PATH not in report.removed
        # Still recorded: once the link is gone, the next reset removes the log.
        assert self.PATH in entries(root)
        scene.plant("rm", str(logs / "app"))
        scene.plant("mv", str(logs / "app.old"), str(logs / "app"))
        again = self._purge(root)
        assert self.PATH in again.removed
        assert not (logs / "app/svc.log").exists()
        assert scene.intact()

    def test_the_users_own_log_is_removed(self, scene: Scene) -> None:
        """The safe walk still removes what it should, in the user's directory."""
        root, logs = self._node(scene)
        report = self._purge(root)
        assert self.PATH in report.removed
        assert not (logs / "app/svc.log").exists()


# A local user's process that takes the supervisor's abstract socket name before the daemon
# does (abstract names have no file mode, and /proc/net/unix lists them for anyone to copy):
# ``room`` listens and leaves its queue room; ``full`` fills its queue and never accepts.
_SQUAT = r"""
import socket, sys, time
name, kind = "\0" + sys.argv[1], sys.argv[2]
held = socket.socket(socket.AF_UNIX)
held.bind(name)
held.listen(0)
if kind == "full":
    first = socket.socket(socket.AF_UNIX)
    first.connect(name)
    second = socket.socket(socket.AF_UNIX)
    second.setblocking(False)
    try:
        second.connect(name)
    except BlockingIOError:
        pass
print("held", flush=True)
time.sleep(300)
"""


class TestSquattedName:
    """A local user who takes the native supervisor's abstract name first must not keep root
    from supervising the node: the name is passed by, the daemon serves its socket file alone
    (in its private run directory) and says who holds the name."""

    @pytest.mark.parametrize("kind", ["room", "full"])
    def test_a_name_taken_by_another_user_is_passed_by(self, scene: Scene, kind: str) -> None:
        from noderole.supervisor._protocol import abstract_address

        name = abstract_address(str(scene.harness.run_dir))
        squatter = subprocess.Popen(
            ["setpriv", f"--reuid={scene.user.uid}", f"--regid={scene.user.gid}",
             "--clear-groups", sys.executable, "-c", _SQUAT, name.lstrip("\0"), kind],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        scene.harness.extra_pids.append(squatter.pid)
        try:
            assert squatter.stdout is not None
            assert squatter.stdout.readline() == "held\n"
            supervisor = scene.harness.supervisor
            status = supervisor.start(scene.harness.spec("a", TICK))
            assert status.state == "running"
            assert _status(scene).state == "running"
            wait_for(
                lambda: scene.said(f"taken by pid {squatter.pid} (uid {scene.user.uid})"),
                "the daemon naming who holds its name",
            )
            supervisor.stop(["a"])
            assert _status(scene).state == "stopped"
            supervisor.shutdown()  # returns: the daemon's lock, not the name, says it is gone
            assert supervisor.daemon_pid() is None
        finally:
            squatter.kill()
            squatter.wait()
            assert squatter.stdout is not None
            squatter.stdout.close()


_KNOCK = r"""
import socket, sys
name, count = "\0" + sys.argv[1], int(sys.argv[2])
for _ in range(count):
    with socket.socket(socket.AF_UNIX) as knock:
        knock.connect(name)
        knock.recv(1)  # the daemon closes a refused connection: wait for that
print("done", flush=True)
"""


class TestRefusedConnections:
    def test_a_flood_of_refused_connections_does_not_rotate_the_log_away(
        self, scene: Scene
    ) -> None:
        """A local user connects to the daemon's abstract name again and again: each is refused,
        and said in the log at most a burst at a time, so the noise cannot rotate the log's
        history (what the daemon said before) away."""
        from noderole.supervisor._protocol import abstract_address

        supervisor = scene.harness.supervisor
        supervisor.start(scene.harness.spec("a", TICK))
        wait_for(lambda: scene.said("supervising from"), "the daemon's first line in its log")
        name = abstract_address(str(scene.harness.run_dir)).lstrip("\0")
        done = scene.user.run(sys.executable, "-c", _KNOCK, name, "300")
        assert done.stdout == "done\n", done.stderr
        text = scene.supervisor_log.read_text()
        refused = [line for line in text.splitlines() if "refused a control connection" in line]
        assert 1 <= len(refused) <= _log.BURST
        assert f"(uid {scene.user.uid})" in refused[0]
        assert "supervising from" in text  # the history is still in the current log
        assert _status(scene).state == "running"


class TestPrivateRunDirectory:
    def test_another_user_cannot_take_the_lock_nor_read_the_log(self, scene: Scene) -> None:
        """apply.lock and supervisor.log are out of a local user's reach; modes 0700/0600."""
        root = scene.harness.root
        run = root / "run/noderole"
        run.mkdir(parents=True)
        run.chmod(0o755)  # as an older version left it: tightened
        with node_lock(NodeRoot(root), timeout=1, clock=SystemClock(), what="apply test"):
            pass
        scene.harness.supervisor.start(scene.spec("a", TICK))
        lock, log = root / LOCK_FILE.lstrip("/"), scene.supervisor_log
        for path in (run, log.parent):
            assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
        for path in (lock, log, run / "state.json", run / "supervisor.pid"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        probe = (
            "import sys\ntry:\n open(sys.argv[1], sys.argv[2])\n"
            "except PermissionError:\n sys.exit(7)\n"
        )
        assert scene.user.run(sys.executable, "-c", probe, str(lock), "r").returncode == 7
        assert scene.user.run(sys.executable, "-c", probe, str(log), "r").returncode == 7

    def test_run_directory_of_another_owner_is_refused(self, scene: Scene) -> None:
        """A run directory owned by someone else is refused, naming it and the fix."""
        run = scene.harness.root / "run/noderole"
        run.mkdir(parents=True)
        os.chown(run, scene.user.uid, scene.user.gid)
        with pytest.raises(SupervisorError, match=r"belongs to uid \d+.*remove it"):
            scene.harness.supervisor.ensure_running()
        with pytest.raises(StateError, match=r"belongs to uid"):
            _take_lock(NodeRoot(scene.harness.root), "x")


def _take_lock(root: NodeRoot, what: str) -> None:
    with node_lock(root, timeout=0, clock=SystemClock(), what=what):
        pass


class TestLockHolder:
    def test_refusal_names_the_real_holder_not_the_note(self, tmp_path: Path) -> None:
        """The wait message names the pid /proc/locks reports, not a note someone else wrote."""
        root = NodeRoot(tmp_path)
        with node_lock(root, timeout=1, clock=SystemClock(), what="first"):
            pass
        lock = tmp_path / LOCK_FILE.lstrip("/")
        lock.write_text("pid 1: a note that lies\n")
        holder = subprocess.Popen(
            [sys.executable, "-c",
             "import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\n"
             "fcntl.flock(fd, fcntl.LOCK_SH)\nprint('held', flush=True)\nsys.stdin.read()",
             str(lock)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "held"
            with pytest.raises(LockedError) as caught:
                _take_lock(root, "second")
            message = str(caught.value)
            assert f"pid {holder.pid}: {sys.executable}" in message
            assert "a note that lies" not in message
        finally:
            holder.kill()
            holder.communicate()  # reaps it and closes its pipes


# ---------------------------------------------------------------------------- part 7


class TestEvidence:
    def test_rate_limiter_passes_a_burst_then_sums_up(self) -> None:
        """The first BURST lines of a window pass; the rest become one summary when it ends."""
        limiter = _log.RateLimiter(burst=3, window=60)
        passed = [limiter.allow("a", float(t))[0] for t in range(10)]
        assert passed == [True] * 3 + [False] * 7
        assert limiter.allow("b", 5.0) == (True, [])  # keys are counted apart
        assert limiter.due(59.0) == []
        assert limiter.due(60.0) == ["a: suppressed 7 similar lines in 60s"]
        assert limiter.due(120.0) == []  # said once; b had nothing suppressed
        assert limiter.allow("a", 121.0) == (True, [])  # a new window

    def test_crash_loop_is_rate_limited_and_errors_are_kept(self, tmp_path: Path) -> None:
        """Many crash lines: at most BURST written; an internal error survives every rotation."""
        code = textwrap.dedent(
            """
            from noderole.supervisor import _log
            _log.log_error("internal error:\\nTraceback: the evidence")
            for i in range(2000):
                _log.log_limited("a", f"a: pid {i} exited (exit code 1) after 0.001s")
                _log.log(f"noise {i} " + "x" * 60)
            """
        )
        log = tmp_path / "supervisor.log"
        env = {**os.environ, "NODEROLE_SUPERVISOR_LOG_BYTES": "4096",
               "NODEROLE_SUPERVISOR_LOG_KEEP": "3"}  # fmt: skip
        with open(log, "ab") as stderr:
            subprocess.run([sys.executable, "-c", code], stderr=stderr, env=env, check=True)
        names = sorted(p.name for p in tmp_path.iterdir())
        assert names == [
            "supervisor-errors.log", "supervisor.log", "supervisor.log.1", "supervisor.log.2",
            "supervisor.log.3",
        ]  # fmt: skip
        text = "".join((tmp_path / n).read_text() for n in names if n.startswith("supervisor.log"))
        assert "the evidence" not in text  # pushed out of the main log by the noise ...
        assert "Traceback: the evidence" in (tmp_path / "supervisor-errors.log").read_text()
        for name in names:
            assert (tmp_path / name).stat().st_size <= 4096 + 200

    def test_real_crash_loop_writes_at_most_a_burst(self, tmp_path: Path) -> None:
        """A service crash-looping fast: restarts go on, exit lines stop at BURST per window."""
        h = Harness(root=tmp_path, supervisor=Supervisor(tmp_path / "run/noderole", timeout=30))
        try:
            sup = Supervision(respawn_delay=0.01, stop_timeout=2)
            h.supervisor.start(h.spec("a", "exit 1", supervision=sup))
            wait_for(
                lambda: h.supervisor.status(["a"])[0].restarts >= 3 * _log.BURST,
                "a crash loop",
            )
            text = (tmp_path / "var/log/noderole/supervisor.log").read_text()
            exits = [line for line in text.splitlines() if "a: pid " in line]
            assert len(exits) == _log.BURST
        finally:
            close_harness(h)


# ---------------------------------------------------------------------------- part 5: ENOSPC


def _unshare_works() -> str | None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare"
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True
    )
    return None if probe.returncode == 0 else f"unshare -m refused: {probe.stderr.strip()}"


def _in_private_mounts(script: str, root: Path, *, timeout: float) -> dict[str, Any]:
    """Run ``script`` (a Python program given ``root``) in a private mount namespace, where it
    may mount small tmpfs over the root's directories, and return the JSON it prints. Skips
    where the namespace cannot be made."""
    why = _unshare_works()
    if why:
        pytest.skip(why)
    out = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-c", script, str(root)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(__file__).parent.parent,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


_FILL = """
def fill(directory):
    fd = os.open(os.path.join(directory, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
"""

_APPLY_FULL = (
    """
import json, os, subprocess, sys
from pathlib import Path
from noderole.clock import SystemClock
from noderole.errors import NoderoleError
from noderole.root import NodeRoot
from noderole.state import node_lock, write_applied
root = Path(sys.argv[1])
for d in ("run", "var/lib/noderole"):
    (root / d).mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(root / d)], check=True)
"""
    + _FILL
    + """
fill(root / "run")
fill(root / "var/lib/noderole")
out = {}
with node_lock(NodeRoot(root), timeout=1, clock=SystemClock(), what="apply full"):
    out["locked"] = True
try:
    write_applied(NodeRoot(root), {"a": {"x": "y" * 100000}})
except NoderoleError as e:
    out["error"] = (type(e).__name__, str(e))
print(json.dumps(out))
"""
)

_RENDER_FULL = (
    """
import json, os, subprocess, sys
from pathlib import Path
from noderole.errors import NoderoleError
from noderole.records import Service
from noderole.render import render_openrc, write_rendered
from noderole.root import NodeRoot
root = Path(sys.argv[1])
(root / "etc").mkdir(parents=True)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(root / "etc")], check=True)
"""
    + _FILL
    + """
fill(root / "etc")
out = {}
try:
    write_rendered(render_openrc([Service(name="web", roles=["r"], command=["/bin/x"])]),
                   root=NodeRoot(root))
except NoderoleError as e:
    out["error"] = (type(e).__name__, str(e))
print(json.dumps(out))
"""
)

_STATE_READ_ONLY = """
import json, subprocess, sys
from pathlib import Path
from noderole.errors import NoderoleError
from noderole.root import NodeRoot
from noderole.state import write_applied
root = Path(sys.argv[1])
state = root / "var/lib/noderole"
state.mkdir(parents=True)
subprocess.run(["mount", "--bind", str(state), str(state)], check=True)
subprocess.run(["mount", "-o", "remount,ro,bind", str(state)], check=True)
out = {}
try:
    write_applied(NodeRoot(root), {"a": {"x": "y"}})
except NoderoleError as e:
    out["error"] = (type(e).__name__, str(e))
print(json.dumps(out))
"""


_TINY_RUN = """
import json, os, signal, subprocess, sys, time
from pathlib import Path
from noderole.records import Supervision
from noderole.supervisor import Supervisor, _log
from tests.supervisor_fixtures import Harness, wait_for
root = Path(sys.argv[1])
(root / "run").mkdir(parents=True)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(root / "run")], check=True)
"""
"""A script's start: a supervisor's run directory on a 64 KB tmpfs (in the caller's mount
namespace), and ``fill`` to fill it."""


_RESPAWN_FULL = (
    _TINY_RUN
    + _FILL
    + """
h = Harness(root=root, supervisor=Supervisor(root / "run/noderole", timeout=30))
first = h.supervisor.start(h.spec("a", "exec sleep 1000",
                                  supervision=Supervision(respawn_delay=0.01, stop_timeout=2)))
state = root / "run/noderole/state.json"
def pid_recorded():
    return json.loads(state.read_text())["services"].get("a", {}).get("pid")
wait_for(lambda: pid_recorded() == first.pid, "the first pid in the state file")
fill(root / "run")
os.kill(first.pid, signal.SIGKILL)
second = wait_for(lambda: next((s for s in h.supervisor.status(["a"]) if s.restarts == 1
                               and s.pid and s.pid != first.pid), None), "a respawn")
recorded = pid_recorded()
daemon = h.supervisor.daemon_pid()
os.kill(daemon, signal.SIGKILL)
from noderole.supervisor._proc import is_alive
def gone():
    return not is_alive(second.pid)
deadline = time.monotonic() + 15
while not gone() and time.monotonic() < deadline:
    time.sleep(0.02)
print(json.dumps({"first": first.pid, "second": second.pid, "recorded": recorded,
                  "second_gone": gone()}))
"""
)


_CRASH_LOOP_FULL = (
    _TINY_RUN
    + _FILL
    + """
h = Harness(root=root, supervisor=Supervisor(root / "run/noderole", timeout=30))
h.supervisor.start(h.spec("keep", "exec sleep 1000"))
fill(root / "run")
for name in ("s1", "s2", "s3"):  # each start is answered once a state write was tried
    h.supervisor.start(h.spec(name, "exec sleep 1000", pidfile=str(root / f"run/{name}.pid")))
loop = Supervision(respawn_delay=0.01, stop_timeout=2)
h.supervisor.start(h.spec("loop", "exit 1", supervision=loop, pidfile=str(root / "run/loop.pid")))
wait_for(lambda: h.supervisor.status(["loop"])[0].restarts >= 3 * _log.BURST, "a crash loop")
log = h.supervisor.log_path
lines = log.read_text().splitlines()
state = root / "run/noderole/state.json"
out = {
    "loop": sum("loop: cannot write pidfile" in line for line in lines),
    "s1": sum("s1: cannot write pidfile" in line for line in lines),
    "state": sum(f"cannot write {state}" in line for line in lines),
    "enospc": any("No space left on device" in line for line in lines),
}
os.unlink(root / "run/filler")
try:
    again = [f"{state} written again", f"loop: pidfile {root}/run/loop.pid written again"]
    wait_for(lambda: all(words in log.read_text() for words in again), "writes that work again")
    out["again"] = True
except BaseException:  # pytest.fail, from wait_for
    out["again"] = False
print(json.dumps(out))
"""
)


_APPLY_CLI_FULL = (
    """
import json, os, shutil, subprocess, sys
from pathlib import Path
import noderole
from click.testing import CliRunner
from noderole.cli import cli
from noderole.cli._app import App
from noderole.root import NodeRoot
root = Path(sys.argv[1])
for d in ("run", "var/lib/noderole"):
    (root / d).mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(root / d)], check=True)
(root / "bin").mkdir()
shutil.copy("/bin/sleep", root / "bin/sleep")
class Plugin:
    @noderole.hookimpl
    def noderole_services(self, node):
        return noderole.Service(name="a", roles=["demo"], command=["/bin/sleep", "1000"],
            environment={"NODEROLE_SUPERVISOR_TEST": str(root)},
            supervision=noderole.Supervision(respawn_delay=0.05, stop_timeout=2))
"""
    + _FILL
    + """
fill(root / "run")
fill(root / "var/lib/noderole")
app = App(root=NodeRoot(root), plugin_objects=(("t", Plugin()),), autoload=False)
result = CliRunner().invoke(cli, ["apply", "demo"], obj=app)
exc = result.exception
print(json.dumps({"code": result.exit_code, "out": result.output,
                  "exc": None if exc is None or isinstance(exc, SystemExit) else repr(exc)}))
"""
)


_MANIFEST_FULL = (
    """
import json, os, subprocess, sys
from noderole.manifest import MANIFEST, entries, record
from noderole.root import NodeRoot
base = sys.argv[1]
state = os.path.join(base, "var/lib/noderole")
os.makedirs(state)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", state], check=True)
os.makedirs(os.path.join(base, "etc"))
manifest = os.path.join(base, MANIFEST.lstrip("/"))
with open(manifest, "w") as f:  # 70 records of one path, 69 of them superseded
    for i in range(70):
        f.write(json.dumps({"path": "/etc/changing", "kind": "file", "digest": f"sha256:{i:064x}"}))
        f.write("\\n")
"""
    + _FILL
    + """
fill(state)
with open(os.path.join(base, "etc/new"), "w") as f:
    f.write("new")
record(NodeRoot(base), "file", ["/etc/new"])
with open(manifest) as f:
    lines = f.read().splitlines()
print(json.dumps({"recorded": sorted(entries(NodeRoot(base))), "lines": len(lines)}))
"""
)


class TestFullRun:
    def test_apply_command_on_a_full_disk_fails_clearly(self, tmp_path: Path) -> None:
        """`noderole apply` with /run and /var/lib/noderole full: exit 1, messages, no traceback."""
        root = tmp_path / "root"
        h = Harness(root=root, supervisor=Supervisor(root / "run/noderole", timeout=30))
        try:
            result = _in_private_mounts(_APPLY_CLI_FULL, root, timeout=90)
            assert result["exc"] is None
            assert result["code"] == 1
            assert "Traceback" not in result["out"]
            assert "File " not in result["out"]
            # The role is recorded before anything starts: a full disk stops apply there.
            assert "cannot record /var/lib/noderole/role" in result["out"]
            assert "No space left on device" in result["out"]
            assert "Starting" not in result["out"]
        finally:
            close_harness(h)

    def test_apply_on_a_full_disk_gives_clear_errors(self, tmp_path: Path) -> None:
        """Full /run: the lock is still taken; full state dir: StateError naming the file."""
        result = _in_private_mounts(_APPLY_FULL, tmp_path / "root", timeout=60)
        assert result["locked"] is True
        kind, message = result["error"]
        assert kind == "StateError"
        assert "/var/lib/noderole/applied.json" in message
        assert "No space left on device" in message
        assert "free space on its file system" in message

    def test_rendering_into_a_full_etc_names_the_fix(self, tmp_path: Path) -> None:
        """A runscript or unit that cannot be written for want of space says to free space.
        Before: "check that the directory is writable and not a link, then render again",
        under apply too."""
        result = _in_private_mounts(_RENDER_FULL, tmp_path / "root", timeout=60)
        kind, message = result["error"]
        assert kind == "BackendError"
        assert message.startswith("cannot write /etc/init.d/web (at ")
        assert message.endswith(
            ": No space left on device; free space on its file system, then run again"
        )

    def test_a_read_only_state_directory_says_to_remount(self, tmp_path: Path) -> None:
        """An image booted with /var read-only: the fix named is a remount, not free space."""
        result = _in_private_mounts(_STATE_READ_ONLY, tmp_path / "root", timeout=60)
        kind, message = result["error"]
        assert kind == "StateError"
        assert "cannot record /var/lib/noderole/applied.json" in message
        assert "Read-only file system" in message
        assert "mounted read-only: remount it read-write" in message
        assert "free space" not in message

    def test_a_full_disk_keeps_a_new_manifest_record(self, tmp_path: Path) -> None:
        """A manifest due for compaction on a full disk: the rewrite has no room, so the new
        record is appended as usual (into the file's last block), never dropped."""
        result = _in_private_mounts(_MANIFEST_FULL, tmp_path / "root", timeout=60)
        assert result["recorded"] == ["/etc/changing", "/etc/new"]
        assert result["lines"] == 71

    def test_respawn_not_recorded_in_state_is_still_known_to_the_watchdog(
        self, tmp_path: Path
    ) -> None:
        """Full /run: a respawn's state is not written, yet a daemon kill -9 leaves no orphan."""
        root = tmp_path / "root"
        h = Harness(root=root, supervisor=Supervisor(root / "run/noderole", timeout=30))
        try:
            result = _in_private_mounts(_RESPAWN_FULL, root, timeout=90)
            assert result["recorded"] == result["first"]  # the state file could not be written
            assert result["second_gone"], "the respawned child was orphaned"
        finally:
            close_harness(h)

    def test_a_crash_loop_with_run_full_says_each_write_failure_once(self, tmp_path: Path) -> None:
        """Full /run: a crash-looping service's pidfile and the state file cannot be written.
        Each failure is said once (per service for pidfiles), and once more when the write
        works again. Before, a line at every respawn and every state write (6,490 lines in a
        minute for 20 services): the log's history rotated away within a minute."""
        root = tmp_path / "root"
        h = Harness(root=root, supervisor=Supervisor(root / "run/noderole", timeout=30))
        try:
            result = _in_private_mounts(_CRASH_LOOP_FULL, root, timeout=120)
            assert result["enospc"]
            assert result["loop"] == 1  # 3 * BURST respawns or more
            assert result["s1"] == 1
            assert result["state"] == 1  # four starts answered, each after a write was tried
            assert result["again"]
        finally:
            close_harness(h)


class TestSafeOpen:
    def test_open_append_refuses_a_link_and_a_fifo(self, tmp_path: Path) -> None:
        """A link at a log is refused with ELOOP; a FIFO is refused at once, not waited on."""
        victim = tmp_path / "victim"
        victim.write_bytes(b"keep")
        (tmp_path / "log").symlink_to(victim)
        with pytest.raises(OSError, match="symbolic link"):
            _safeopen.open_append(str(tmp_path / "log"))
        os.mkfifo(tmp_path / "fifo")
        with pytest.raises(OSError, match="not a regular file"):
            _safeopen.open_append(str(tmp_path / "fifo"))
        assert victim.read_bytes() == b"keep"

    def test_replace_file_replaces_a_link_and_leaves_no_temporary(self, tmp_path: Path) -> None:
        """A link at the target is replaced by the rename; the target's file is untouched."""
        victim = tmp_path / "victim"
        victim.write_bytes(b"keep")
        (tmp_path / "pid").symlink_to(victim)
        _safeopen.replace_file(str(tmp_path / "pid"), b"42\n", mode=0o644)
        assert (tmp_path / "pid").read_bytes() == b"42\n"
        assert not (tmp_path / "pid").is_symlink()
        assert victim.read_bytes() == b"keep"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["pid", "victim"]

    def test_private_dir_tightens_modes_and_refuses_links(self, tmp_path: Path) -> None:
        """0755 becomes 0700; a link in place of the directory is refused."""
        loose = tmp_path / "loose"
        loose.mkdir(mode=0o755)
        _safeopen.private_dir(str(loose))
        assert stat.S_IMODE(loose.stat().st_mode) == 0o700
        (tmp_path / "link").symlink_to(loose)
        with pytest.raises(OSError, match="not a real directory"):
            _safeopen.private_dir(str(tmp_path / "link"))

    def test_open_dir_follows_links_only_in_trusted_directories(self, tmp_path: Path) -> None:
        """A link in a root-only directory is followed; one in a world-writable one is not."""
        real = tmp_path / "real"
        real.mkdir()
        (tmp_path / "ok").symlink_to(real)
        fd = _safeopen.open_dir(str(tmp_path / "ok"))
        os.close(fd)
        shared = tmp_path / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        (shared / "bad").symlink_to(real)
        with pytest.raises(OSError, match="refusing to follow the symbolic link"):
            _safeopen.open_dir(str(shared / "bad"))


class TestUnrecordableStart:
    def test_a_start_the_watchdog_cannot_be_told_about_is_undone(self, tmp_path: Path) -> None:
        """The watchdog's pipe full: the new process is killed and the start reported failed."""
        from noderole.supervisor._daemon import Daemon

        h = Harness(root=tmp_path, supervisor=Supervisor(tmp_path / "run/noderole", timeout=30))
        run_dir = tmp_path / "run/noderole"
        run_dir.mkdir(parents=True)
        daemon = Daemon(str(run_dir))
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            with contextlib.suppress(BlockingIOError):
                while True:
                    os.write(w, b"x" * 4096)
            daemon.watchdog_w = w  # a watchdog that stopped reading
            answers: list[dict[str, Any]] = []
            daemon.start_new(h.spec("a", "exec sleep 1000"), False, "", answers.append)
            daemon.flush(force=True)  # a start is answered once a state write covers it
            (answer,) = answers
            status: dict[str, Any] = answer["statuses"][0]
            assert status["state"] == "crashed"
            assert "cannot tell the watchdog" in status["reason"]
            assert h.settled_marked([]) == []  # the started process was killed
        finally:
            daemon.watchdog_w = -1
            os.close(r)
            os.close(w)
            daemon.server.close()
            for pid in h.marked():
                with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                    os.kill(pid, signal.SIGKILL)
