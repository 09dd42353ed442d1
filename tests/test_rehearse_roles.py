"""`noderole rehearse ROLE` with the shipped plugins, for every shipped role."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from noderole.cli import cli
from noderole.cli._app import App
from noderole.root import NodeRoot
from noderole.testing import node_processes

pytest.importorskip("noderole_k3s")
pytest.importorskip("noderole_konnectivity")


@pytest.mark.slow
class TestRehearseShippedRoles:
    @pytest.mark.parametrize(
        ("role", "services"),
        [
            ("server", ["k3s", "konnectivity-server"]),
            ("server-join", ["k3s", "konnectivity-server"]),
            ("agent", ["k3s-agent"]),
        ],
    )
    def test_role_comes_up_and_leaves_nothing(self, role: str, services: list[str]) -> None:
        """Every service of the role starts with the stand-ins, and nothing is left afterwards."""
        from noderole.plugins import load_plugins

        # Only the shipped plugins: another installed plugin (docs/examples) is not under test.
        others = [n for n in load_plugins().names() if n not in ("builtin", "k3s", "konnectivity")]
        app = App(root=NodeRoot("/"), disabled_plugins=tuple(others))
        result = CliRunner().invoke(cli, ["rehearse", role], obj=app, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        scratch = Path(result.stdout.splitlines()[0].split(" in ", 1)[1])
        for name in services:
            assert f" * Started {name}" in result.stdout
            status_line = next(
                line for line in result.stdout.splitlines() if line.startswith(name + " ")
            )
            assert status_line.split()[1] in ("running", "ready")
        assert not scratch.exists()
        assert node_processes(scratch) == []


# Run in a process of its own: a signal ends the command attempts of the process for good (it
# is leaving), which would cancel every later test's command wait in pytest's own.
_SIGNAL_AT_CLEAN_UP = """
import json, signal, sys
from noderole.cli._app import App
from noderole.plugins import load_plugins
from noderole.rehearsal import run_rehearsal
from noderole.root import NodeRoot

number = getattr(signal, sys.argv[1])
others = [n for n in load_plugins().names() if n not in ("builtin", "k3s", "konnectivity")]
app = App(root=NodeRoot("/"), disabled_plugins=tuple(others))
said, delivered = [], []

def raise_at_next_line(frame, event, arg):  # the rehearsal's own frame
    if event == "line":
        frame.f_trace = None
        sys.settrace(None)
        signal.raise_signal(number)
    return raise_at_next_line

def show_status(role, rows, verdict):
    said.append("SERVICE")
    sys.settrace(lambda *args: None)  # f_trace works only while a global trace is set
    sys._getframe(1).f_trace = raise_at_next_line

# Stands in for the handler noderole installs (death by the signal): recorded here.
signal.signal(number, lambda signum, frame: delivered.append(signum))
ended = "returned"
try:
    run_rehearsal(app, "server", keep=False, echo=said.append, show_status=show_status)
except SystemExit as exc:
    ended = f"SystemExit {exc.code}"
except KeyboardInterrupt:
    ended = "KeyboardInterrupt"
print(json.dumps({"said": said, "delivered": delivered, "ended": ended}))
"""


class TestSignalAsTheCleanUpBegins:
    @pytest.mark.parametrize("name", ["SIGHUP", "SIGTERM", "SIGINT"])
    def test_a_signal_between_the_work_and_the_clean_up_still_cleans_up(self, name: str) -> None:
        """The signal is raised at the first line the rehearsal runs after the status is shown,
        where the old clean-up had not yet put off signals: it cut the clean-up short (found in
        CI: the SIGHUP test once ended without "stopped every service of the rehearsal"), and
        the scratch root and its supervisor were left. The command still ends as the signal
        would have it."""
        import json
        import shutil
        import signal
        import subprocess
        import sys

        number = getattr(signal, name)
        done = subprocess.run(
            [sys.executable, "-c", _SIGNAL_AT_CLEAN_UP, name],
            capture_output=True,
            text=True,
            timeout=120,
            env={k: v for k, v in os.environ.items() if k != "NODEROLE_ROOT"},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        result = json.loads(done.stdout.splitlines()[-1])
        said = result["said"]
        scratch = Path(said[0].split(" in ", 1)[1])
        left = node_processes(scratch)
        for pid in left:  # a supervisor the clean-up did not stop (its owner has ended)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        kept = scratch.exists()
        shutil.rmtree(scratch, ignore_errors=True)
        if name == "SIGINT":
            assert result["ended"] == "KeyboardInterrupt"
        else:
            assert result["ended"] == f"SystemExit {128 + number}"
            assert result["delivered"] == [number]
        assert "\nstopped every service of the rehearsal" in said
        assert not kept
        assert left == []


class TestInterruptedRehearsal:
    @pytest.mark.parametrize(
        ("first", "when", "status", "last"),
        [
            ("SIGINT", "SERVICE ", 130, "noderole: interrupted"),
            ("SIGTERM", "SERVICE ", -15, "noderole: terminated by SIGTERM"),
            ("SIGHUP", "SERVICE ", -1, "noderole: terminated by SIGHUP"),
            ("SIGTERM", " * Starting k3s", -15, "noderole: terminated by SIGTERM"),
            ("SIGHUP", " * Starting k3s", -1, "noderole: terminated by SIGHUP"),
        ],
        ids=["ctrl-c", "sigterm", "sighup", "sigterm-while-starting", "sighup-while-starting"],
    )
    def test_signals_through_the_clean_up_still_leave_nothing(
        self, tmp_path: Path, first: str, when: str, status: int, last: str
    ) -> None:
        """Ctrl-C, SIGTERM or SIGHUP again and again until the clean-up says it is done (an
        impatient user; ``timeout``; an init system; an SSH session gone): the
        clean-up is not cut short, so the rehearsal's supervisor and services are stopped and
        its scratch root removed, and the command ends as the first signal would have it (130
        for Ctrl-C, death by SIGTERM or SIGHUP). Before, a Ctrl-C that landed in the
        supervisor's shutdown left the scratch root (and could leave the supervisor), and a
        SIGTERM or SIGHUP left the supervisor, its services and the scratch root for good."""
        import os
        import shutil
        import signal
        import subprocess
        import sys
        import time

        from noderole.plugins import load_plugins
        from noderole.testing import eventually
        from tests.test_cli_exit import AS_AT_A_TERMINAL

        others = [n for n in load_plugins().names() if n not in ("builtin", "k3s", "konnectivity")]
        disabled = [a for n in others for a in ("--disable-plugin", n)]
        out = tmp_path / "out"
        env = {k: v for k, v in os.environ.items() if k != "NODEROLE_ROOT"}
        with out.open("w") as stdout:
            process = subprocess.Popen(
                [sys.executable, "-c", AS_AT_A_TERMINAL, *disabled, "rehearse", "server"],
                stdout=stdout,
                stderr=subprocess.STDOUT,
                env=env,
            )
        scratch: Path | None = None
        left: list[int] = []
        kept = False
        try:
            eventually(
                lambda: when in out.read_text() or process.poll() is not None,
                f"{when.strip()!r} in the rehearsal's output",
                timeout=60,
            )
            scratch = Path(out.read_text().splitlines()[0].split(" in ", 1)[1])
            while process.poll() is None and "stopped every" not in out.read_text():
                process.send_signal(getattr(signal, first))
                time.sleep(0.02)
            ended = process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            if scratch is not None:
                left = node_processes(scratch)
                for pid in left:
                    with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                        os.kill(pid, signal.SIGKILL)
                kept = scratch.exists()
                shutil.rmtree(scratch, ignore_errors=True)
        text = out.read_text()
        assert ended == status, text
        assert "stopped every service of the rehearsal" in text
        assert text.splitlines()[-1] == last
        assert left == []
        assert not kept

    def test_a_killed_rehearsal_leaves_nothing_running(self, tmp_path: Path) -> None:
        """SIGKILL (an OOM kill, ``kill -9``, a CI runner's last word) once k3s runs runs no
        clean-up, yet the rehearsal's supervisor, which lives for the rehearsal's process,
        stops its services and exits. Only the scratch root (mode 0700) is left. Before, all of
        it ran on. The rehearsal is stopped (SIGSTOP) before it is killed, so that the kill
        lands before its clean-up (a rehearsal that got that far is run again)."""
        for attempt in range(5):
            if _kill_once_k3s_runs(tmp_path / f"out{attempt}"):
                return
        pytest.fail("the rehearsal reached its status table before it could be stopped, 5 times")


def _kill_once_k3s_runs(out: Path) -> bool:
    """Rehearse, SIGSTOP once k3s has started, SIGKILL, and check that nothing of the scratch
    root runs on; False (nothing checked) when the rehearsal was already at its status table."""
    import os
    import shutil
    import signal
    import subprocess
    import sys

    from noderole.plugins import load_plugins
    from noderole.testing import eventually

    others = [n for n in load_plugins().names() if n not in ("builtin", "k3s", "konnectivity")]
    disabled = [a for n in others for a in ("--disable-plugin", n)]
    env = {k: v for k, v in os.environ.items() if k != "NODEROLE_ROOT"}
    with out.open("w") as stdout:
        process = subprocess.Popen(
            [sys.executable, "-m", "noderole", *disabled, "rehearse", "server"],
            stdout=stdout,
            stderr=subprocess.STDOUT,
            env=env,
        )
    scratch: Path | None = None
    try:
        eventually(
            lambda: " * Started k3s" in out.read_text() or process.poll() is not None,
            "k3s started in the rehearsal",
            timeout=60,
        )
        process.send_signal(signal.SIGSTOP)
        scratch = Path(out.read_text().splitlines()[0].split(" in ", 1)[1])
        if "SERVICE " in out.read_text():  # too late: its clean-up may have begun
            process.send_signal(signal.SIGCONT)
            process.wait(timeout=60)
            return False
        running = scratch
        assert node_processes(running)
        process.kill()
        assert process.wait(timeout=60) == -signal.SIGKILL
        eventually(lambda: node_processes(running) == [], "the rehearsal's processes to end")
        return True
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if scratch is not None:
            for pid in node_processes(scratch):
                with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                    os.kill(pid, signal.SIGKILL)
            shutil.rmtree(scratch, ignore_errors=True)
