"""noderole.prom written by the native supervisor itself, after changes only it sees.

A real daemon (tests/supervisor_fixtures.py) is handed the file with the ``textfile`` request;
then a kill -9 of a service, or the daemon giving up on one, shows in the file with no CLI call.
The coalescing of bursts and the heartbeat's minute are tested with a fake clock; a full disk
or a missing directory is logged and never ends the daemon.
"""

from __future__ import annotations

import os
import signal
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

import noderole
from noderole.cli import cli
from noderole.cli._app import App
from noderole.metrics import TEXTFILE, ServiceSample, render_metrics
from noderole.records import Supervision
from noderole.root import NodeRoot
from noderole.supervisor import ServiceStatus, SupervisorError
from noderole.supervisor._textfile import (
    HEARTBEAT,
    WRITE_GAP,
    Target,
    Textfile,
    render,
    target_from_wire,
)
from noderole.supervisor.exposition import HEARTBEAT_SERIES
from tests.supervisor_fixtures import MARK, Harness, harness, wait_for
from tests.test_metrics import exporter, scrape

__all__ = ["exporter", "harness"]

SLEEP = "exec sleep 1000"
HEAD = (
    "# HELP noderole_apply_success 1 when the last noderole apply of the role succeeded, "
    "0 when a service failed.\n"
    "# TYPE noderole_apply_success gauge\n"
    'noderole_apply_success{role="r"} 1\n'
)


def series(path: Path) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The file's samples ({} while it does not exist)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def state_of(got: dict[tuple[str, frozenset[tuple[str, str]]], float], service: str) -> str:
    """The state whose noderole_service_state series is 1."""
    (state,) = [
        dict(labels)["state"]
        for (name, labels), value in got.items()
        if name == "noderole_service_state" and dict(labels)["service"] == service and value == 1
    ]
    return state


def restarts(got: dict[tuple[str, frozenset[tuple[str, str]]], float], service: str) -> float:
    return got.get(("noderole_service_restarts_total", frozenset({("service", service)})), -1)


def heartbeats(got: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> dict[str, float]:
    """The heartbeat series: role -> value ({} when the file has none)."""
    return {
        dict(labels)["role"]: value
        for (name, labels), value in got.items()
        if name == HEARTBEAT_SERIES
    }


class TestDaemonWrites:
    def test_kill_9_shows_in_the_file_without_the_cli(self, harness: Harness) -> None:
        """After kill -9 of a service the daemon respawns it and rewrites noderole.prom: one
        restart, state running; the CLI's head and the role label are kept."""
        collector = harness.root / "collector"
        collector.mkdir()
        path = collector / TEXTFILE
        first = harness.supervisor.start(harness.spec("a", SLEEP))
        assert first.pid is not None
        done = harness.supervisor.publish_textfile(str(path), role="r", names=["a", "b"], head=HEAD)
        assert done is True
        got = series(path)
        assert got[("noderole_apply_success", frozenset({("role", "r")}))] == 1
        assert (state_of(got, "a"), restarts(got, "a")) == ("running", 0)
        assert state_of(got, "b") == "stopped"  # in the role, never started: as status says
        os.kill(first.pid, signal.SIGKILL)
        wait_for(lambda: restarts(series(path), "a") == 1, "the restart in noderole.prom")
        wait_for(lambda: state_of(series(path), "a") == "running", "running again in the file")
        got = series(path)
        assert got[("noderole_service_up", frozenset({("role", "r"), ("service", "a")}))] == 1
        assert got[("noderole_apply_success", frozenset({("role", "r")}))] == 1

    def test_giving_up_shows_crashed(self, harness: Harness) -> None:
        """A crash-looping service the daemon gives up on is crashed and down in the file."""
        path = harness.root / TEXTFILE
        spec = harness.spec(
            "loop", "exit 3", supervision=Supervision(respawn_delay=0.05, respawn_max=2)
        )
        harness.supervisor.start(spec)
        harness.supervisor.publish_textfile(str(path), role="r", names=["loop"], head="")
        wait_for(lambda: series(path) and state_of(series(path), "loop") == "crashed", "crashed")
        got = series(path)
        assert got[("noderole_service_up", frozenset({("role", "r"), ("service", "loop")}))] == 0
        assert restarts(got, "loop") == 2

    def test_the_same_text_as_status_format_prometheus(self, harness: Harness) -> None:
        """The daemon's file is byte for byte what the CLI renders for the same statuses, then
        the daemon's own heartbeat family."""
        path = harness.root / TEXTFILE
        harness.supervisor.start(harness.spec("a", SLEEP))
        harness.supervisor.publish_textfile(str(path), role="r", names=["a"], head="")
        (status,) = harness.supervisor.status(["a"])
        cli_text = render_metrics(
            role="r",
            apply=None,
            services=[ServiceSample(name="a", state=status.state, restarts=status.restarts)],
        )
        text = path.read_text()
        assert text.startswith(cli_text)
        (beat,) = heartbeats(series(path)).values()
        assert text[len(cli_text) :] == render(
            Target(path=str(path), role="r", names=[], head=""), [], beat
        )

    def test_the_daemon_writes_its_heartbeat_and_its_last_write_drops_it(
        self, harness: Harness
    ) -> None:
        """While it runs the daemon's file carries its heartbeat, the wall clock of the write;
        once every service is stopped and it exits, its last write has none (a node stopped on
        purpose must not look like a silent supervisor)."""
        path = harness.root / TEXTFILE
        harness.supervisor.start(harness.spec("a", SLEEP))
        before = time.time()
        assert harness.supervisor.publish_textfile(str(path), role="r", names=["a"], head="")
        after = time.time()
        assert list(heartbeats(series(path))) == ["r"]
        assert before - 1 <= heartbeats(series(path))["r"] <= after + 1
        harness.supervisor.stop(["a"])
        wait_for(lambda: not harness.daemons(), "the idle daemon to exit")
        got = series(path)
        assert state_of(got, "a") == "stopped"
        assert heartbeats(got) == {}
        assert HEARTBEAT_SERIES not in path.read_text()

    def test_last_state_written_when_the_daemon_exits(self, harness: Harness) -> None:
        """Stopping the last service ends the daemon; its last write says stopped."""
        path = harness.root / TEXTFILE
        harness.supervisor.start(harness.spec("a", SLEEP))
        harness.supervisor.publish_textfile(str(path), role="r", names=["a"], head="")
        harness.supervisor.stop(["a"])
        wait_for(lambda: not harness.daemons(), "the idle daemon to exit")
        assert state_of(series(path), "a") == "stopped"

    def test_missing_directory_is_logged_not_fatal(self, harness: Harness) -> None:
        """A directory that does not exist: the request says not written, the daemon logs it
        once and carries on supervising; once the directory exists the file follows."""
        directory = harness.root / "absent"
        path = directory / TEXTFILE
        harness.supervisor.start(harness.spec("a", SLEEP))
        assert (
            harness.supervisor.publish_textfile(str(path), role="r", names=["a"], head="") is False
        )
        log = harness.supervisor.log_path.read_text()
        assert log.count(f"cannot write the fleet metrics {path}") == 1
        (status,) = harness.supervisor.status(["a"])
        assert status.state == "running"
        directory.mkdir()
        wait_for(lambda: path.exists(), "the retried write")
        assert state_of(series(path), "a") == "running"
        assert "written again" in harness.supervisor.log_path.read_text()

    def test_a_planted_link_is_replaced_not_followed(self, harness: Harness) -> None:
        """A symbolic link at noderole.prom is replaced by the file; its target is untouched."""
        target = harness.root / "elsewhere"
        target.write_text("keep")
        path = harness.root / TEXTFILE
        path.symlink_to(target)
        harness.supervisor.start(harness.spec("a", SLEEP))
        assert harness.supervisor.publish_textfile(str(path), role="r", names=["a"], head="")
        assert target.read_text() == "keep"
        assert not path.is_symlink()
        assert state_of(series(path), "a") == "running"

    def test_bad_request_is_refused_naming_the_field(self, harness: Harness) -> None:
        """A relative path is refused with the field named; nothing is written."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        with pytest.raises(SupervisorError, match="path must be an absolute file path"):
            harness.supervisor.publish_textfile("noderole.prom", role="r", names=["a"], head="")

    def test_no_daemon_answers_none(self, harness: Harness) -> None:
        """With no daemon running the caller is told to write the file itself; none starts."""
        path = harness.root / TEXTFILE
        assert harness.supervisor.publish_textfile(str(path), role="r", names=[], head="") is None
        assert not harness.daemons()
        assert not path.exists()


class FakeTime:
    """A fake clock and the timers armed against it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Callable[[], None]]] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> object:
        self.timers.append((self.now + delay, callback))
        return None

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [t for t in self.timers if t[0] <= self.now]
        self.timers = [t for t in self.timers if t[0] > self.now]
        for _, callback in due:
            callback()


class TestCoalescing:
    def test_a_crash_loop_of_200_services_writes_once_a_second(self, tmp_path: Path) -> None:
        """200 services changing every 0.1 s for 10 s (20,000 changes): one write per second
        at most, and the last state is in the file."""
        clock = FakeTime()
        names = [f"s{i}" for i in range(200)]
        states = {n: ServiceStatus(name=n, state="running") for n in names}
        path = tmp_path / TEXTFILE
        writer = Textfile(
            lambda wanted: [states[n] for n in wanted],
            clock.call_later,
            lambda _: None,
            lambda: clock.now,
        )
        writer.configure(Target(path=str(path), role="r", names=names, head=""))
        assert writer.writes == 1
        for tick in range(1, 101):
            for name in names:
                states[name] = ServiceStatus(name=name, state="backoff", restarts=tick)
                writer.changed()
                writer.flush()  # what the daemon's loop does after each batch
            clock.advance(0.1)
        assert writer.writes <= 1 + 10 + 1
        clock.advance(WRITE_GAP)
        got = series(path)
        assert restarts(got, "s199") == 100
        assert state_of(got, "s0") == "backoff"

    def test_nothing_changed_nothing_written(self, tmp_path: Path) -> None:
        """Without a change no write happens before the heartbeat is due."""
        clock = FakeTime()
        writer = Textfile(
            lambda wanted: [ServiceStatus(name=n) for n in wanted],
            clock.call_later,
            lambda _: None,
            lambda: clock.now,
        )
        writer.configure(Target(path=str(tmp_path / TEXTFILE), role="r", names=["a"], head=""))
        for _ in range(50):
            clock.advance(1)
            writer.flush()
        assert writer.writes == 1

    def test_full_disk_is_logged_once_and_retried(self, tmp_path: Path) -> None:
        """A write refused (here: a directory that is not one) is logged once, retried every
        gap, and the recovery is logged once."""
        clock = FakeTime()
        lines: list[str] = []
        blocker = tmp_path / "collector"
        blocker.write_text("a file where the directory should be")
        writer = Textfile(
            lambda wanted: [ServiceStatus(name=n) for n in wanted],
            clock.call_later,
            lines.append,
            lambda: clock.now,
        )
        writer.configure(Target(path=str(blocker / TEXTFILE), role="r", names=["a"], head=""))
        for _ in range(5):
            clock.advance(WRITE_GAP)
        assert writer.writes == 0
        assert len(lines) == 1
        assert "cannot write the fleet metrics" in lines[0]
        blocker.unlink()
        blocker.mkdir()
        clock.advance(WRITE_GAP)
        assert writer.writes == 1
        assert lines[1].endswith("written again")

    def test_a_refused_temporary_is_logged_once(self) -> None:
        """A directory that refuses the temporary file (read-only, full: here /proc) is logged
        once, not once a second: the temporary's random name is not part of the message."""
        clock = FakeTime()
        lines: list[str] = []
        writer = Textfile(
            lambda wanted: [ServiceStatus(name=n) for n in wanted],
            clock.call_later,
            lines.append,
            lambda: clock.now,
        )
        writer.configure(Target(path=f"/proc/{TEXTFILE}", role="r", names=["a"], head=""))
        for _ in range(5):
            clock.advance(WRITE_GAP)
        assert writer.writes == 0
        assert lines == [
            f"cannot write the fleet metrics /proc/{TEXTFILE}: No such file or directory "
            f"(the services carry on; retried every {WRITE_GAP:g}s)"
        ]


def _writer(
    clock: FakeTime, lines: list[str] | None = None, wall: float = 1_700_000_000.5
) -> Textfile:
    """A Textfile on ``clock`` whose services are all running, its wall clock ``wall`` plus
    the fake time."""
    return Textfile(
        lambda wanted: [ServiceStatus(name=n, state="running") for n in wanted],
        clock.call_later,
        (lines if lines is not None else []).append,
        lambda: clock.now,
        lambda: wall + clock.now,
    )


class TestHeartbeat:
    def test_rewritten_after_a_minute_with_nothing_changed_and_not_before(
        self, tmp_path: Path
    ) -> None:
        """With no change the file is rewritten once HEARTBEAT seconds have passed since the
        last write, not a second sooner, then again a minute later; the loop's once-a-second
        flush is all it needs (no timer is armed)."""
        clock = FakeTime()
        path = tmp_path / TEXTFILE
        writer = _writer(clock)
        writer.configure(Target(path=str(path), role="r", names=["a"], head=""))
        assert writer.writes == 1
        for _ in range(int(HEARTBEAT) - 1):
            clock.advance(1)
            writer.flush()
        assert writer.writes == 1
        assert clock.timers == []
        clock.advance(1)
        writer.flush()
        assert writer.writes == 2
        assert heartbeats(series(path)) == {"r": 1_700_000_000.5 + HEARTBEAT}
        clock.advance(HEARTBEAT - 1)
        writer.flush()
        assert writer.writes == 2
        clock.advance(1)
        writer.flush()
        assert writer.writes == 3

    def test_counted_from_the_last_write_a_change_made(self, tmp_path: Path) -> None:
        """A write for a change restarts the minute: the heartbeat is due a minute after it."""
        clock = FakeTime()
        writer = _writer(clock)
        writer.configure(Target(path=str(tmp_path / TEXTFILE), role="r", names=["a"], head=""))
        clock.advance(30)
        writer.changed()
        writer.flush()
        assert writer.writes == 2
        clock.advance(HEARTBEAT - 1)
        writer.flush()
        assert writer.writes == 2
        clock.advance(1)
        writer.flush()
        assert writer.writes == 3

    def test_its_value_is_the_wall_clock_of_the_write(self, tmp_path: Path) -> None:
        """The heartbeat is the injected wall clock at the write (unix time), appended after
        the service families, with the role's label."""
        clock = FakeTime()
        path = tmp_path / TEXTFILE
        writer = _writer(clock, wall=1_800_000_000.25)
        writer.configure(Target(path=str(path), role="server", names=["a"], head=HEAD))
        text = path.read_text()
        assert heartbeats(series(path)) == {"server": 1_800_000_000.25}
        assert text.startswith(HEAD)
        assert text.rindex("noderole_service_restarts_total") < text.index(HEARTBEAT_SERIES)
        assert text.endswith(f'{HEARTBEAT_SERIES}{{role="server"}} 1800000000.25\n')

    def test_the_last_write_has_no_heartbeat_and_happens_with_nothing_changed(
        self, tmp_path: Path
    ) -> None:
        """close() (the daemon exits) writes the last state at once though nothing changed,
        and that write has no heartbeat: the one written before leaves the file."""
        clock = FakeTime()
        path = tmp_path / TEXTFILE
        writer = _writer(clock)
        writer.configure(Target(path=str(path), role="r", names=["a"], head=HEAD))
        assert heartbeats(series(path)) == {"r": 1_700_000_000.5}
        clock.advance(0.1)  # inside the write gap, nothing changed: flush() writes nothing
        writer.flush()
        assert writer.writes == 1
        writer.close()
        assert writer.writes == 2
        got = series(path)
        assert heartbeats(got) == {}
        assert got[("noderole_apply_success", frozenset({("role", "r")}))] == 1
        assert state_of(got, "a") == "running"

    def test_a_failed_heartbeat_is_logged_once_and_retried(self, tmp_path: Path) -> None:
        """A heartbeat write the disk refuses keeps the retry every WRITE_GAP and the log
        once, and the recovery is logged once."""
        clock = FakeTime()
        lines: list[str] = []
        directory = tmp_path / "collector"
        directory.mkdir()
        writer = _writer(clock, lines)
        writer.configure(Target(path=str(directory / TEXTFILE), role="r", names=["a"], head=""))
        assert writer.writes == 1
        (directory / TEXTFILE).unlink()
        directory.rmdir()
        directory.write_text("a file where the directory should be")
        clock.advance(HEARTBEAT)
        writer.flush()
        for _ in range(5):
            clock.advance(WRITE_GAP)
        assert writer.writes == 1
        assert len(lines) == 1
        assert "cannot write the fleet metrics" in lines[0]
        directory.unlink()
        directory.mkdir()
        clock.advance(WRITE_GAP)
        assert writer.writes == 2
        assert lines[1].endswith("written again")
        assert heartbeats(series(directory / TEXTFILE)) == {"r": 1_700_000_000.5 + clock.now}


class TestRequest:
    @pytest.mark.parametrize(
        ("change", "message"),
        [
            ({"path": "rel"}, "path must be an absolute file path"),
            ({"path": "/dir/"}, "path must be an absolute file path"),
            ({"role": ""}, "role must be a non-empty string"),
            ({"names": "a"}, "names must be a list"),
            ({"head": 3}, "head must be a string"),
            ({"head": "no newline"}, "head must end with a newline"),
        ],
    )
    def test_refused_fields(self, change: dict[str, object], message: str) -> None:
        """Each malformed field is refused, named."""
        request: dict[str, object] = {"path": "/p", "role": "r", "names": ["a"], "head": ""}
        with pytest.raises(ValueError, match=message):
            target_from_wire({**request, **change})


def _plugin(mark: str) -> types.ModuleType:
    module = types.ModuleType("textfile_plugin")

    @noderole.hookimpl
    def noderole_services(node: object) -> list[noderole.Service]:
        return [
            noderole.Service(
                name="worker",
                roles=["fleet"],
                command=["/usr/local/bin/worker"],
                environment={MARK: mark},
                supervision=noderole.Supervision(respawn_delay=0.05),
            )
        ]

    module.noderole_services = noderole_services  # type: ignore[attr-defined]
    return module


def _fleet(harness: Harness, textfile_dir: str) -> App:
    """An App over the harness's root with role ``fleet`` (one worker that sleeps) and
    ``textfile_dir`` set."""
    root = harness.root
    worker = root / "usr/local/bin/worker"
    worker.parent.mkdir(parents=True)
    worker.write_text("#!/bin/sh\nexec sleep 1000\n")
    worker.chmod(0o755)
    (root / "etc/noderole").mkdir(parents=True)
    (root / "etc/noderole/config.toml").write_text(
        f'[noderole]\nnet_check = false\ntextfile_dir = "{textfile_dir}"\n'
    )
    return App(
        root=NodeRoot(root), plugin_objects=(("textfile", _plugin(harness.mark)),), autoload=False
    )


class TestThroughTheCli:
    def test_node_exporter_serves_what_the_daemon_wrote(
        self, harness: Harness, exporter: tuple[str, Path]
    ) -> None:
        """apply --backend native with textfile_dir: the daemon writes noderole.prom; after a
        kill -9 of the service a real node_exporter serves the restart, no CLI call between."""
        url, directory = exporter
        root = harness.root
        app = _fleet(harness, f"/{directory.relative_to(root)}")
        result = CliRunner().invoke(cli, ["apply", "fleet", "--backend", "native"], obj=app)
        assert result.exit_code == 0, result.output
        path = directory / TEXTFILE
        assert "fleet metrics not written" not in result.output
        (status,) = harness.supervisor.status(["worker"])
        assert status.pid is not None
        got = series(path)
        assert got[("noderole_apply_success", frozenset({("role", "fleet")}))] == 1
        assert restarts(got, "worker") == 0
        os.kill(status.pid, signal.SIGKILL)
        wait_for(lambda: restarts(series(path), "worker") == 1, "the restart in the file")
        served = scrape(url)
        assert 'noderole_service_restarts_total{service="worker"} 1' in served
        assert 'noderole_service_state{service="worker",state="running"} 1' in served
        assert "node_textfile_scrape_error 0" in served

    def test_the_heartbeat_is_the_daemons_alone(self, harness: Harness) -> None:
        """apply --backend native with textfile_dir: the daemon's file has its heartbeat, which
        `status --format prometheus` does not print; after `stop` (the daemon's last write, and
        the file the command writes itself with no daemon left) the file has none."""
        root = harness.root
        (root / "collector").mkdir()
        app = _fleet(harness, "/collector")
        path = root / "collector" / TEXTFILE
        result = CliRunner().invoke(cli, ["apply", "fleet", "--backend", "native"], obj=app)
        assert result.exit_code == 0, result.output
        assert list(heartbeats(series(path))) == ["fleet"]
        shown = CliRunner().invoke(
            cli, ["status", "fleet", "--backend", "native", "--format", "prometheus"], obj=app
        )
        assert shown.exit_code == 0, shown.output
        assert 'noderole_service_up{role="fleet",service="worker"} 1' in shown.output
        assert HEARTBEAT_SERIES not in shown.output
        result = CliRunner().invoke(cli, ["stop"], obj=app)
        assert result.exit_code == 0, result.output
        wait_for(lambda: not harness.daemons(), "the supervisor to exit")
        got = series(path)
        assert state_of(got, "worker") == "stopped"
        assert heartbeats(got) == {}

    def test_a_relative_textfile_dir_warns_and_the_apply_stands(self, harness: Harness) -> None:
        """A relative textfile_dir made apply and stop end in a traceback (exit 1) once the
        services had started or stopped: a metrics file noderole cannot write must not fail
        them, as for a directory that cannot be written."""
        root = harness.root
        app = _fleet(harness, "textfile")
        warning = (
            "noderole: warning: fleet metrics not written: /etc/noderole/config.toml:"
            "noderole.textfile_dir: 'textfile' is not an absolute path within the node"
        )
        for args in (["apply", "fleet", "--backend", "native"], ["stop"]):
            result = CliRunner().invoke(cli, args, obj=app)
            assert result.exit_code == 0, result.output
            assert warning in result.output
        assert not (root / "textfile").exists()
