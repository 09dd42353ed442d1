"""The supervisor's log sinks when a service's log cannot be written or opened.

A file system that filled up over weeks leaves the service's log open at the next boot: every
write then fails with ENOSPC. The sink dropped the output without a word (the tester saw 0-byte
logs, an `apply` that exited 0 and nothing anywhere to say why). Writes here fail for real:
the sink's descriptor is pointed at ``/dev/full``, whose every write the kernel refuses with
ENOSPC, then back at the file.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from noderole.supervisor import _safeopen
from noderole.supervisor._loop import Loop
from noderole.supervisor._sinks import LogSink, Sinks


def _point(sink: LogSink, path: str) -> None:
    """Make the sink's descriptor write to ``path`` (as a reopen would, without its checks)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    os.dup2(fd, sink.fd)
    os.close(fd)


class TestWriteFailure:
    def test_a_full_disk_is_said_once_and_its_recovery_with_the_bytes_lost(
        self, tmp_path: Path, capfd: pytest.CaptureFixture[str]
    ) -> None:
        log = tmp_path / "k3s.log"
        sink = LogSink(str(log))
        try:
            sink.write(b"before\n")
            _point(sink, "/dev/full")
            for _ in range(3):
                sink.write(b"lost line\n")
            said = capfd.readouterr().err
            assert said.count("cannot write the log") == 1, said
            assert f"cannot write the log {log}: No space left on device" in said
            assert "its output is dropped until it can be written" in said
            assert "(free space on its file system)" in said
            _point(sink, str(log))
            sink.write(b"after\n")
            said = capfd.readouterr().err
            assert f"the log {log} is written again; 30 bytes of output were lost" in said
            sink.write(b"more\n")
            assert capfd.readouterr().err == ""  # said once, not at every write
        finally:
            sink.close()
        assert log.read_bytes() == b"before\nafter\nmore\n"

    def test_a_service_that_starts_again_is_not_said_again(
        self, tmp_path: Path, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """A crash-looping service opens its log at every start, a new sink each time: the
        failure was said once per respawn (a tester counted one line per start), and its
        recovery lost the bytes dropped before."""
        log = tmp_path / "crashy.log"
        loop = Loop()
        sinks = Sinks(loop)
        try:
            for _ in range(3):  # three starts, each writing into a full file system
                fd = sinks.output(str(log), None, name="crashy")
                os.close(fd)
                sink = sinks.by_path[str(log)]
                _point(sink, "/dev/full")
                sink.write(b"lost\n")
                sinks.release(sink)
            fd = sinks.output(str(log), None, name="crashy")
            os.close(fd)
            sink = sinks.by_path[str(log)]
            sink.write(b"back\n")
            sinks.release(sink)
        finally:
            loop.selector.close()
        said = capfd.readouterr().err
        assert said.count("cannot write the log") == 1, said
        assert f"the log {log} is written again; 15 bytes of output were lost" in said


class TestOpenFailure:
    def test_the_message_names_the_whole_path_and_the_fix(
        self, tmp_path: Path, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """The error named the file relative to its directory (``'k3s.log'``, opened through a
        descriptor), and a read-only file system got no fix."""
        log = tmp_path / "k3s.log"
        log.mkdir()  # something in the way: the open fails, as on a read-only mount
        loop = Loop()
        sinks = Sinks(loop)
        fd = sinks.output(str(log), None, name="k3s")
        try:
            assert os.path.samefile(f"/proc/self/fd/{fd}", os.devnull)
        finally:
            os.close(fd)
            loop.selector.close()
        said = capfd.readouterr().err
        assert f"k3s: cannot open its log {log}: " in said, said
        assert "its output is dropped until its next start" in said


class TestFixFor:
    @pytest.mark.parametrize(
        ("code", "fix"),
        [
            (errno.ENOSPC, "free space on its file system"),
            (errno.EROFS, "its file system is mounted read-only: remount it read-write"),
            (errno.EACCES, "check the directory's owner, mode and attributes (lsattr)"),
            (errno.EIO, ""),
        ],
    )
    def test_each_reason_has_its_fix(self, code: int, fix: str) -> None:
        assert _safeopen.fix_for(OSError(code, os.strerror(code))) == fix


class TestSupervisorLogRemedy:
    """The command's warning for a supervisor log it cannot open gave a full disk's fix for
    every reason: "Free space or inodes ... (df -h, df -i)" for a read-only /var/log too."""

    def test_a_read_only_file_system_is_told_to_remount(self) -> None:
        from noderole.supervisor._client import _log_remedy

        error = OSError(errno.EROFS, os.strerror(errno.EROFS))
        assert _log_remedy(error) == "Its file system is mounted read-only: remount it read-write"

    def test_a_full_one_to_free_space_or_inodes(self) -> None:
        from noderole.supervisor._client import _log_remedy

        error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        assert _log_remedy(error) == "Free space or inodes on its file system (df -h, df -i)"

    def test_something_in_its_way_to_remove_it(self) -> None:
        from noderole.supervisor._client import _log_remedy

        error = OSError(errno.EISDIR, os.strerror(errno.EISDIR))
        assert _log_remedy(error) == "Remove what is in its way"


def _log_to_a_full_disk(message: str) -> None:
    """``_log.log(message)`` with its stderr (the supervisor's log) on /dev/full: every write
    refused with ENOSPC by the kernel."""
    from noderole.supervisor import _log

    saved = os.dup(2)
    full = os.open("/dev/full", os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.dup2(full, 2)
        _log.log(message)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(full)


class TestSupervisorLogFallback:
    def test_a_line_the_full_log_refuses_goes_to_the_run_directory(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The supervisor's own log on the same full file system as the service's: the line
        saying the service's log cannot be written was lost with it. It goes to the run
        directory's supervisor.log (on /run) instead."""
        from noderole.supervisor import _log

        fallback = tmp_path / "run" / "supervisor.log"
        fallback.parent.mkdir(mode=0o700)
        monkeypatch.setattr(_log, "_path", [None])
        monkeypatch.setattr(_log, "_path_known", [True])
        monkeypatch.setattr(_log, "_fallback", [None])
        _log.set_fallback(str(fallback))
        _log_to_a_full_disk("cannot write the log /var/log/k3s.log: No space left on device")
        text = fallback.read_text()
        said = "cannot write the log /var/log/k3s.log: No space left on device\n"
        assert text.endswith(said), text
        assert oct(fallback.stat().st_mode & 0o777) == "0o600"

    def test_the_fallback_is_rotated_as_the_log_is(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """/run is memory: a crash loop writing there through a full /var/log grew it without
        bound (about 3 MB a day per service)."""
        from noderole.supervisor import _log

        fallback = tmp_path / "supervisor.log"
        fallback.write_bytes(b"x" * 2000)
        monkeypatch.setattr(_log, "_path", [None])
        monkeypatch.setattr(_log, "_path_known", [True])
        monkeypatch.setattr(_log, "_fallback", [str(fallback)])
        monkeypatch.setattr(_log, "MAX_BYTES", 1000)
        _log_to_a_full_disk("one more line")
        assert (tmp_path / "supervisor.log.1").read_bytes() == b"x" * 2000
        assert fallback.read_text().endswith("one more line\n")


_FULL_VAR_LOG = """
import json, os, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, os.getcwd())
from tests.supervisor_fixtures import Harness
from noderole.supervisor import Supervisor
root = Path(sys.argv[1])
logs = root / "var/log"
logs.mkdir(parents=True)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(logs)], check=True)
# An earlier boot's files, open again at this one; then the file system fills up.
(logs / "noderole").mkdir(mode=0o700)
(logs / "noderole" / "supervisor.log").touch(mode=0o600)
(logs / "chatty.log").touch()
fd = os.open(logs / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
try:
    while True:
        os.write(fd, b"x" * 4096)
except OSError:
    pass
finally:
    os.close(fd)
h = Harness(root=root, supervisor=Supervisor(root / "run" / "noderole", timeout=30))
chatty = "while :; do echo line; sleep 0.05; done"
spec = h.spec("chatty", chatty, stdout_log=str(logs / "chatty.log"))
h.supervisor.start(spec)
fallback = root / "run" / "noderole" / "supervisor.log"
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    if fallback.exists() and "cannot write the log" in fallback.read_text():
        break
    time.sleep(0.05)
out = {
    "fallback": fallback.read_text() if fallback.exists() else "",
    "log": (logs / "noderole" / "supervisor.log").read_text(),
    "service_log": (logs / "chatty.log").read_text(),
    "running": [s.state for s in h.supervisor.status(["chatty"])],
}
h.supervisor.shutdown()
print(json.dumps(out))
"""


class TestFullVarLog:
    def test_a_full_var_log_is_said_in_the_run_directory(self, tmp_path: Path) -> None:
        """/var/log filled over weeks, its files there from the last boot: every open works,
        every write fails. The service runs on, and the line naming its log and the fix goes
        to /run/noderole/supervisor.log, since the supervisor's own log is as full."""
        import json
        import subprocess
        import sys

        from noderole.supervisor import Supervisor
        from tests.harness.openrc import unshare_problem
        from tests.supervisor_fixtures import Harness, close_harness

        why = "needs root to mount a tmpfs" if os.geteuid() != 0 else unshare_problem()
        if why:
            pytest.skip(why)
        outer = Harness(root=tmp_path, supervisor=Supervisor(tmp_path / "run" / "noderole"))
        try:
            done = subprocess.run(
                ["unshare", "-m", "--propagation", "private", sys.executable, "-c",
                 _FULL_VAR_LOG, str(tmp_path)],
                capture_output=True, text=True, timeout=60, cwd=Path(__file__).parent.parent,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            out = json.loads(done.stdout)
        finally:
            close_harness(outer)  # the daemon lives in the namespace: ended by pid all the same
        log = tmp_path / "var" / "log" / "chatty.log"
        assert out["running"] == ["running"]
        assert out["log"] == ""  # the full file system's files
        assert out["service_log"] == ""
        assert (
            f"cannot write the log {log}: No space left on device; its output is dropped until "
            "it can be written (free space on its file system)"
        ) in out["fallback"], out["fallback"]
