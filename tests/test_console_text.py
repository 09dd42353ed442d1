"""What a service wrote, shown on root's terminal by `status`: read, never acted on, and bounded.

A tester's service wrote a right-to-left override (U+202E), which `status` passed through, so
the line read on screen in another order than the log holds; and 64 KiB without a newline,
which `status` printed as one line, flooding the terminal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from noderole.console import inert
from noderole.operations import LOG_LINE_WIDTH, _log_tail


@pytest.mark.parametrize("code", [0x202E, 0x202A, 0x2066, 0x2069, 0x200F, 0x061C])
def test_bidirectional_controls_are_written_out(code: int) -> None:
    assert inert(f"ok{chr(code)}gol") == f"ok\\u{code:04x}gol"


def test_other_text_is_kept() -> None:
    assert inert("k3s: 🚀 démarré — ok") == "k3s: 🚀 démarré — ok"


def test_a_log_without_newlines_is_shown_bounded(tmp_path: Path) -> None:
    log = tmp_path / "svc.log"
    log.write_text("x" * 50_000)
    (line,) = _log_tail(str(log), 5, [])
    assert line == "x" * LOG_LINE_WIDTH + f"... ({50_000 - LOG_LINE_WIDTH:,} more characters)"


def test_a_secret_across_the_cut_is_hidden_first(tmp_path: Path) -> None:
    log = tmp_path / "svc.log"
    log.write_text("a" * (LOG_LINE_WIDTH - 3) + "s3cr3t" + "b" * 10 + "\nshort line\n")
    first, second = _log_tail(str(log), 5, ["s3cr3t"])
    assert "s3c" not in first
    assert first.startswith("a" * (LOG_LINE_WIDTH - 3) + "***")
    assert second == "short line"


def test_a_stop_under_way_reads_stopping_in_the_status_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A `stop` interrupted with Ctrl-C: the supervisor finishes it (SIGKILL at the service's
    stop timeout), and until then the process runs, its state "running" with the reason
    "stopping". The table said running for a service about to be killed."""
    from noderole.cli._output import echo_status
    from noderole.errors import ExitCode

    row = {
        "name": "stubborn", "state": "running", "pid": 4242, "next_attempt": None,
        "uptime": 3.0, "restarts": 0, "last_exit": None, "log": None, "reason": "stopping",
        "survivors": False, "needs_ready": False, "unsupervised": False, "last_apply": None,
        "log_tail": [],
    }  # fmt: skip
    echo_status("demo", [row], ExitCode.OK, as_json=False)
    line = capsys.readouterr().out.splitlines()[1]
    assert line.split()[:3] == ["stubborn", "stopping", "4242"]
