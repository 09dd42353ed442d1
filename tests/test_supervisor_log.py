"""The supervisor's own log stays at its path, whatever becomes of the file open before.

Removed (``rm``), moved aside by logrotate (``mv`` then SIGHUP), rotated by the daemon while the
watchdog still holds the first copy: every line, the watchdog's report after the daemon's
``kill -9`` included, goes to ``supervisor.log`` and its ``.1`` ... ``.KEEP`` copies, never to a
file named after where the descriptor went (``supervisor.log (deleted)``, ``supervisor.log.1.1``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from noderole.records import Supervision
from noderole.supervisor._proc import is_alive
from tests.supervisor_fixtures import Harness, harness, wait_for

__all__ = ["harness"]


def _said(path: Path, words: str) -> bool:
    try:
        return words in path.read_text()
    except FileNotFoundError:
        return False


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _give_up_once(harness: Harness, name: str) -> None:
    """Make the daemon log a few lines: ``name`` exits, is respawned once, exits, is given up.

    Once its status says ``crashed``, its lines are written (the daemon answers after them).
    """
    once = Supervision(respawn_delay=0.01, respawn_max=1, stop_timeout=2)
    harness.supervisor.start(harness.spec(name, "exit 1", supervision=once))
    wait_for(lambda: harness.supervisor.status([name])[0].state == "crashed", f"{name} given up")


def _started(harness: Harness) -> Path:
    """A daemon running one service; the path of its log, once its first line is there."""
    harness.supervisor.start(harness.spec("sleeper", "exec sleep 1000"))
    log = harness.supervisor.log_path
    wait_for(lambda: _said(log, "supervising from"), "the daemon's first line")
    return log


class TestTheLogStaysAtItsPath:
    def test_a_removed_log_is_made_again(self, harness: Harness) -> None:
        """`rm supervisor.log`: the next line makes it again. Before, the daemon went on
        writing into the removed file, and supervisor.log never came back."""
        log = _started(harness)
        log.unlink()
        _give_up_once(harness, "after-rm")
        assert _said(log, "after-rm: gave up after 1 respawn")
        assert _names(log.parent) == ["supervisor.log"]

    def test_a_log_moved_aside_then_sighup_is_written_at_its_path(self, harness: Harness) -> None:
        """logrotate's `mv supervisor.log supervisor.log.1` and SIGHUP: the daemon writes to a
        new supervisor.log. Before, it wrote on into supervisor.log.1 (SIGHUP reopened only the
        services' logs), then rotated that into supervisor.log.1.1."""
        log = _started(harness)
        aside = log.with_name("supervisor.log.1")
        log.rename(aside)
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        os.kill(daemon, signal.SIGHUP)
        wait_for(
            lambda: (
                _said(log, "SIGHUP: log files reopened")
                or _said(aside, "SIGHUP: log files reopened")
            ),
            "the SIGHUP's line",
        )
        _give_up_once(harness, "after-hup")
        text = log.read_text()
        assert "SIGHUP: log files reopened" in text
        assert "after-hup: gave up after 1 respawn" in text
        assert "supervising from" in aside.read_text()
        assert "SIGHUP" not in aside.read_text()
        assert _names(log.parent) == ["supervisor.log", "supervisor.log.1"]

    def test_the_watchdog_reports_at_the_path_after_the_daemon_rotated(
        self, harness: Harness, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Rotation at every line (1 byte, 3 copies): the copy the watchdog inherited at its fork
        is long removed when the daemon is SIGKILLed (an OOM kill); the watchdog's report goes
        to supervisor.log all the same. Before, it went to a new file named
        `supervisor.log.3 (deleted)`."""
        monkeypatch.setenv("NODEROLE_SUPERVISOR_LOG_BYTES", "1")
        monkeypatch.setenv("NODEROLE_SUPERVISOR_LOG_KEEP", "3")
        sleeper = harness.supervisor.start(harness.spec("sleeper", "exec sleep 1000"))
        assert sleeper.pid is not None
        log = harness.supervisor.log_path
        for name in ("one", "two"):  # six lines or more: six rotations or more
            _give_up_once(harness, name)
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        os.kill(daemon, signal.SIGKILL)
        wait_for(lambda: not harness.watchdogs(), "the watchdog's end")
        assert not is_alive(sleeper.pid)
        assert _names(log.parent) == [
            "supervisor.log", "supervisor.log.1", "supervisor.log.2", "supervisor.log.3"
        ]  # fmt: skip
        assert f"supervisor {daemon} died; killed sleeper: {sleeper.pid}" in log.read_text()
