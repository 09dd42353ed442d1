"""How the supervisor starts a process: ``posix_spawn`` where it can, ``Popen`` where it must.

A service that keeps the daemon's identity and its working directory (the node root) is started
with ``os.posix_spawn`` (half the daemon's CPU of a Popen, paid at every respawn of a crash
loop); one with another ``cwd``, user or group through ``subprocess.Popen``. The child must not
be able to tell which: the same descriptors, signal dispositions, stdin, session, environment,
and the same error for a program that cannot run. Real daemons, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from noderole.supervisor import _child
from noderole.supervisor._proc import proc_stat
from tests.supervisor_fixtures import Harness, harness, wait_for

__all__ = ["harness"]  # the fixture, imported for pytest

# What the child reports, in order: its working directory, its session id and pid (a session
# of its own: equal), stdin, every open descriptor of the shell, and the ignored-signal mask.
_REPORT = (
    "pwd; cut -d' ' -f6 /proc/$$/stat; echo $$; readlink /proc/$$/fd/0; "
    "ls /proc/$$/fd | sort -n | tr '\\n' ' '; echo; "
    "grep '^SigIgn' /proc/$$/status | cut -f2"
)


def _report(harness: Harness, cwd: str, tmp_path: Path, name: str) -> list[str]:
    out = tmp_path / f"report-{name}"
    script = f"({_REPORT}) > {out}.tmp; mv {out}.tmp {out}; exec sleep 1000"
    status = harness.supervisor.start(harness.spec(name, script, cwd=cwd))
    assert status.state == "running", status
    lines: list[str] = wait_for(lambda: out.exists() and out.read_text().splitlines(), "report")
    harness.supervisor.stop(name)
    return lines


class TestBothWaysGiveTheSameChild:
    def test_the_daemon_runs_in_its_node_root(self, harness: Harness) -> None:
        """The daemon's working directory is its node's ``/`` (the scratch root here): a
        service that keeps the default working directory is started with posix_spawn."""
        harness.supervisor.start(harness.spec("a", "exec sleep 1000"))
        pid = harness.supervisor.daemon_pid()
        assert pid is not None
        assert os.readlink(f"/proc/{pid}/cwd") == str(harness.root)

    def test_the_node_root_and_another_directory_give_the_same_child(
        self, harness: Harness, tmp_path: Path
    ) -> None:
        """The daemon's own directory (posix_spawn) and another one (Popen): a session of its
        own, stdin from /dev/null, descriptors 0, 1 and 2 only (nothing of the daemon's),
        SIGPIPE and SIGXFSZ not ignored (Python ignores SIGPIPE in the daemon)."""
        workdir = tmp_path / "work"
        workdir.mkdir()
        spawned = _report(harness, f"{harness.root}/", tmp_path, "spawned")
        popened = _report(harness, str(workdir), tmp_path, "popened")
        assert spawned[0] == str(harness.root)
        assert popened[0] == str(workdir)
        for lines in (spawned, popened):
            _, session, pid, stdin, fds, ignored = lines
            assert session == pid  # setsid: the child leads a session of its own
            assert stdin == "/dev/null"
            # The shell's own descriptors (`ls` runs in a subshell): nothing was inherited.
            assert fds.split() == ["0", "1", "2"]
            mask = int(ignored, 16)
            assert not mask & (1 << (signal.SIGPIPE - 1))
            assert not mask & (1 << (signal.SIGXFSZ - 1))

    def test_the_current_directory_is_spawned_without_popen(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """In the supervisor's own directory (however spelled) with no user or group, the
        start is a ``posix_spawn``; another directory goes through Popen."""
        here = tmp_path / "here"
        here.mkdir()
        monkeypatch.chdir(here)
        log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fast = _child.spawn(
                argv=["/bin/true"], environment={}, cwd=f"{here}/", user=None, group=None,
                stdout=log, stderr=log,
            )  # fmt: skip
            slow = _child.spawn(
                argv=["/bin/true"], environment={}, cwd=str(tmp_path), user=None, group=None,
                stdout=log, stderr=log,
            )  # fmt: skip
        finally:
            os.close(log)
        assert isinstance(fast, _child.Child)
        assert isinstance(slow, subprocess.Popen)
        assert fast.wait(timeout=10) == 0
        assert slow.wait(timeout=10) == 0


class TestErrors:
    @pytest.mark.parametrize("where", ["/", "elsewhere"])
    def test_a_missing_program_names_its_path(
        self, where: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        monkeypatch.chdir("/")
        cwd = "/" if where == "/" else str(tmp_path)
        with pytest.raises(_child.SpawnError) as raised:
            _child.spawn(
                argv=["/nonexistent/bin/x"], environment={}, cwd=cwd, user=None, group=None,
                stdout=1, stderr=2,
            )  # fmt: skip
        assert str(raised.value) == "cannot execute /nonexistent/bin/x: no such file"

    @pytest.mark.parametrize("where", ["/", "elsewhere"])
    def test_a_file_that_is_not_executable_says_so(
        self, where: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        if os.geteuid() == 0:
            program = tmp_path / "dir-not-program"  # root may execute any mode: use a directory
            program.mkdir()
            why = "permission denied: it is a directory, not a program file"
        else:
            program = tmp_path / "not-executable"
            program.write_text("#!/bin/sh\n")
            mode = program.stat().st_mode & 0o7777
            why = f"permission denied: it is not executable (mode {mode:04o})"
        monkeypatch.chdir("/")
        cwd = "/" if where == "/" else str(tmp_path)
        with pytest.raises(_child.SpawnError) as raised:
            _child.spawn(
                argv=[str(program)], environment={}, cwd=cwd, user=None, group=None,
                stdout=1, stderr=2,
            )  # fmt: skip
        assert str(raised.value) == f"cannot execute {program}: {why}"


def _programs_that_do_not_run(directory: Path) -> dict[str, tuple[Path, str]]:
    """Files the kernel refuses to run, each with the reason the supervisor must give: made
    from this machine's own /bin/true, patched where the kernel looks."""
    from noderole.supervisor._execerror import _elf_loader, _head

    made: dict[str, tuple[Path, str]] = {}
    script = directory / "script-without-interpreter"
    script.write_text("#!/nonexistent/python3 -u\nprint('up')\n")
    made["interpreter"] = (
        script,
        "its interpreter /nonexistent/python3 (its #! line) does not exist: install it, or "
        "correct the #! line",
    )
    text = directory / "text-without-shebang"
    text.write_text("k3s server --config /etc/rancher/k3s/config.yaml\n")
    made["no #!"] = (
        text,
        "it is not a program this machine runs: a script needs a #! line naming its interpreter",
    )
    true = Path("/bin/true").read_bytes()
    ours = os.uname().machine
    other, number = ("x86_64", 62) if ours != "x86_64" else ("aarch64", 183)
    foreign = directory / "foreign-binary"
    foreign.write_bytes(true[:18] + number.to_bytes(2, "little") + true[20:])
    made["machine"] = (foreign, f"it is a program for {other}, and this machine is {ours}")
    loader = _elf_loader("/bin/true", _head("/bin/true") or b"")
    assert loader is not None, "/bin/true is expected to be dynamically linked"
    missing = "/lib/ld-nowhere.so"
    assert len(missing) <= len(loader)
    at = true.index(loader.encode() + b"\0")
    patched = missing.encode().ljust(len(loader), b"\0")
    other_libc = directory / "binary-for-another-libc"
    other_libc.write_bytes(true[:at] + patched + true[at + len(loader) :])
    made["loader"] = (
        other_libc,
        f"the program loader it names, {missing}, does not exist: it was built for another "
        "machine or C library (glibc or musl) than this one",
    )
    for path, _ in made.values():
        path.chmod(0o755)
    unexecutable = directory / "mode-0644"
    unexecutable.write_bytes(true)
    unexecutable.chmod(0o644)
    made["mode"] = (unexecutable, "permission denied: it is not executable (mode 0644)")
    return made


class TestWhyAProgramDoesNotRun:
    """The kernel's "No such file or directory" for a file that is there, and "Exec format
    error" whatever the cause, said as the cause (before: "cannot execute X: no such file" for
    a script whose #! interpreter is missing, an unexplained "Exec format error")."""

    @pytest.mark.parametrize("where", ["/", "elsewhere"])  # posix_spawn, then Popen
    @pytest.mark.parametrize("case", ["interpreter", "no #!", "machine", "loader", "mode"])
    def test_the_supervisor_names_the_cause(
        self, case: str, where: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        program, why = _programs_that_do_not_run(tmp_path)[case]
        monkeypatch.chdir("/")
        with pytest.raises(_child.SpawnError) as raised:
            _child.spawn(
                argv=[str(program)], environment={}, cwd="/" if where == "/" else str(tmp_path),
                user=None, group=None, stdout=1, stderr=2,
            )  # fmt: skip
        assert str(raised.value) == f"cannot execute {program}: {why}"

    @pytest.mark.parametrize("case", ["interpreter", "machine", "loader"])
    def test_noderole_exec_names_the_cause(self, case: str, tmp_path: Path) -> None:
        """``noderole exec`` (what OpenRC and systemd files run) says the same."""
        from click.testing import CliRunner

        import noderole
        from noderole.cli import cli
        from noderole.cli._app import App
        from noderole.root import NodeRoot

        program, why = _programs_that_do_not_run(tmp_path)[case]

        class Plugin:
            @noderole.hookimpl
            def noderole_services(self) -> list[noderole.Service]:
                return [noderole.Service(name="a", command=[f"/{program.name}"], roles=["r"])]

        app = App(root=NodeRoot(tmp_path), plugin_objects=(("p", Plugin()),), autoload=False)
        done = CliRunner().invoke(cli, ["exec", "a"], obj=app)
        assert done.exit_code == 2, done.output
        assert f"cannot exec /{program.name} for a: {why}" in done.output


class TestChild:
    def _spawn(self, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> _child.Child:
        monkeypatch.chdir("/")
        child = _child.spawn(
            argv=argv, environment={}, cwd="/", user=None, group=None, stdout=1, stderr=2
        )
        assert isinstance(child, _child.Child)
        return child

    def test_poll_and_wait_give_popen_exit_codes(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """An exit status as itself, a signal as its negative number (what Popen returns)."""
        child = self._spawn(["/bin/sh", "-c", "exit 3"], monkeypatch)
        assert child.wait(timeout=10) == 3
        assert child.poll() == 3  # reaped once, kept
        sleeper = self._spawn(["/bin/sleep", "1000"], monkeypatch)
        try:
            assert sleeper.poll() is None
            with pytest.raises(subprocess.TimeoutExpired):
                sleeper.wait(timeout=0.05)
        finally:
            os.kill(sleeper.pid, signal.SIGKILL)
        assert sleeper.wait() == -signal.SIGKILL

    def test_a_child_reaped_elsewhere_counts_as_exited(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With its exit already collected (SIGCHLD ignored, or a waitpid elsewhere), poll does
        not raise: the process is gone."""
        child = self._spawn(["/bin/true"], monkeypatch)
        os.waitpid(child.pid, 0)
        assert child.poll() == 0

    def test_the_child_runs_before_spawn_returns_its_pid(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The pid names the new program at once (the daemon reads its start time next)."""
        child = self._spawn(["/bin/sleep", "1000"], monkeypatch)
        try:
            st = proc_stat(child.pid)
            assert st is not None
            assert st.session == child.pid
        finally:
            os.kill(child.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
        assert child.returncode == -signal.SIGKILL
