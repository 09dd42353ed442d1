"""How the ``noderole`` command ends: output flushed, exit status kept, no finalization wait.

The command (``noderole.cli.run``, also ``python -m noderole``) leaves through ``os._exit`` once
:func:`noderole.cli.main` is done; these tests run it as a real process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from noderole.cli import _exit_status
from tests.modules_probe import run_snippet


def _noderole(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "noderole", *args], capture_output=True, text=True, timeout=60
    )


class TestExit:
    def test_output_is_flushed_before_leaving(self) -> None:
        """Everything printed reaches a pipe, to the last line, with status 0."""
        done = _noderole("--help")
        assert done.returncode == 0
        assert done.stdout.startswith("Usage: noderole")
        assert done.stdout.rstrip().splitlines()[-1].strip()  # the command list's last line

    def test_a_usage_error_keeps_its_status(self) -> None:
        """A usage error still exits 2 with click's message on stderr."""
        done = _noderole("no-such-command")
        assert done.returncode == 2
        assert "no such command 'no-such-command'" in done.stderr

    def test_a_command_error_keeps_its_status(self, tmp_path: Path) -> None:
        """A command's own failure keeps its exit code and message (no role recorded: usage)."""
        done = _noderole("--root", str(tmp_path), "status")
        assert done.returncode == 2
        assert "no role given" in " ".join(done.stderr.split())

    @pytest.mark.parametrize(
        ("code", "status", "printed"),
        [(None, 0, ""), (0, 0, ""), (3, 3, ""), (256 + 7, 7, ""), ("gone wrong", 1, "gone wrong")],
    )
    def test_exit_status_is_what_sys_exit_gives(
        self, code: object, status: int, printed: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """SystemExit's code maps to the status Python would exit with; a message is printed."""
        assert _exit_status(code) == status
        assert capsys.readouterr().err.strip() == printed


class TestStart:
    def test_the_console_script_sets_the_collectors_pace_before_anything_loads(self) -> None:
        """``noderole`` (and ``python -m noderole``) enter through noderole._start, which imports
        only gc before raising the first generation's threshold: the start-up's allocations
        trigger no collection, while later ones still do."""
        import tomllib

        from noderole._start import GC_THRESHOLD

        project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
        assert project["project"]["scripts"]["noderole"] == "noderole._start:run"
        probe = (
            "import gc, sys\n"
            "import noderole._start\n"
            "print(sorted({'typing', 'click', 'noderole.cli'} & set(sys.modules)))\n"
            "import noderole.cli\n"
            "noderole.cli.run = lambda: print(gc.get_threshold(), gc.isenabled())\n"
            "noderole._start.run()\n"
        )
        assert run_snippet(probe) == ["[]", f"{GC_THRESHOLD} True"]
