"""noderole upgraded under a running native supervisor: the daemon speaks the old protocol.

The daemon is the one process of noderole that outlives a command: a package upgrade (or a
`pip install -U`) on a running node leaves a daemon of the old version, which refuses every request
of the new one. Each test starts a real daemon whose protocol version is one less than this
noderole's (its launch source sets the constant before the daemon runs; nothing else differs),
starts real services through it, then talks to it as the upgraded noderole does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from noderole.supervisor import SupervisorError, _client, _protocol
from noderole.supervisor._proc import is_alive
from tests.supervisor_fixtures import Harness, wait_for
from tests.supervisor_fixtures import harness as harness  # the fixture, for pytest
from tests.test_engine import Node, sleeper
from tests.test_engine import node as node  # the fixture, for pytest

NEW = _protocol.PROTOCOL_VERSION
OLD = NEW - 1


LAUNCH = _client._LAUNCH
"""This version's launch source, before any test changes it."""


def _speak(monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """Daemons started from now on speak ``version``, and so does this process's client."""
    line = "from noderole.supervisor._daemon import main\n"
    assert line in LAUNCH
    prefix = f"import noderole.supervisor._protocol as p\np.PROTOCOL_VERSION = {version}\n"
    monkeypatch.setattr(_client, "_LAUNCH", LAUNCH.replace(line, prefix + line))
    monkeypatch.setattr(_protocol, "PROTOCOL_VERSION", version)


@pytest.fixture
def upgraded(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Give to :func:`_speak`; this version's launch is back before the other fixtures end."""
    yield monkeypatch
    monkeypatch.setattr(_client, "_LAUNCH", LAUNCH)
    monkeypatch.setattr(_protocol, "PROTOCOL_VERSION", NEW)


def _old_daemon_with(harness: Harness, upgraded: pytest.MonkeyPatch, *names: str) -> dict[str, int]:
    """Start ``names`` (sleepers) under a daemon of the old protocol, then speak the new one.
    Returns each service's pid."""
    _speak(upgraded, OLD)
    pids = {}
    for name in names:
        status = harness.supervisor.start(harness.spec(name, "exec sleep 300"))
        assert status.pid
        pids[name] = status.pid
    _speak(upgraded, NEW)
    return pids


def _daemon(harness: Harness) -> int:
    (pid,) = harness.daemons()
    return pid


class TestOldDaemon:
    def test_a_request_names_the_versions_and_the_fix(
        self, harness: Harness, upgraded: pytest.MonkeyPatch
    ) -> None:
        """A start under the old daemon fails with why and what to run; nothing is touched."""
        pids = _old_daemon_with(harness, upgraded, "a")
        daemon = _daemon(harness)
        with pytest.raises(SupervisorError) as caught:
            harness.supervisor.start(harness.spec("b", "exec sleep 300"))
        message = str(caught.value)
        assert f"(pid {daemon})" in message
        assert f"protocol {OLD}" in message
        assert f"this noderole speaks {NEW}" in message
        assert "before noderole was upgraded" in message
        assert "`noderole stop`" in message
        assert "`noderole apply" in message
        assert is_alive(daemon)
        assert is_alive(pids["a"])
        assert "b" not in {s.name for s in harness.supervisor.status() if s.pid}

    def test_status_answers_from_the_record(
        self, harness: Harness, upgraded: pytest.MonkeyPatch
    ) -> None:
        """`status` shows the services as the old daemon last recorded them, says why, and
        warns once with the fix; later starts through the same client fail at once."""
        warned: list[str] = []
        harness.supervisor.warn = warned.append
        pids = _old_daemon_with(harness, upgraded, "a", "b")
        rows = {s.name: s for s in harness.supervisor.status()}
        assert {n: rows[n].pid for n in pids} == pids
        assert all(rows[n].state == "running" for n in pids)
        assert "another version of noderole" in rows["a"].reason
        assert rows["a"].reason.startswith("as last recorded: ")
        assert len(warned) == 1
        assert "`noderole stop`" in warned[0]
        assert harness.supervisor.not_answering == warned[0]

    def test_stopping_some_of_its_services_is_refused(
        self, harness: Harness, upgraded: pytest.MonkeyPatch
    ) -> None:
        """The old daemon can only be ended as a whole: stopping a alone would stop b too."""
        pids = _old_daemon_with(harness, upgraded, "a", "b")
        daemon = _daemon(harness)
        with pytest.raises(SupervisorError) as caught:
            harness.supervisor.stop(["a"])
        message = str(caught.value)
        assert "cannot stop only a" in message
        assert "it also runs b" in message
        assert "`noderole stop`" in message
        assert is_alive(daemon)
        assert all(map(is_alive, pids.values()))

    def test_stopping_every_service_ends_it(
        self, harness: Harness, upgraded: pytest.MonkeyPatch
    ) -> None:
        """A stop of every service it runs ends the old daemon (SIGTERM: it stops them as it
        always did); the next start gets a daemon of this version, and nothing is left over."""
        pids = _old_daemon_with(harness, upgraded, "a", "b")
        daemon = _daemon(harness)
        statuses = harness.supervisor.stop(["b", "a"])
        assert [(s.name, s.state, s.pid) for s in statuses] == [
            ("b", "stopped", None),
            ("a", "stopped", None),
        ]
        assert not is_alive(daemon)
        assert not any(map(is_alive, pids.values()))
        assert harness.daemons() == []
        wait_for(lambda: not harness.watchdogs(), "the old daemon's watchdog to exit")
        status = harness.supervisor.start(harness.spec("a", "exec sleep 300"))
        assert status.state == "running"
        assert harness.supervisor.daemon_pid() == _daemon(harness) != daemon

    def test_shutdown_ends_it(self, harness: Harness, upgraded: pytest.MonkeyPatch) -> None:
        """`reset` and a rehearsal's clean-up shut the supervisor down: an old one too."""
        pids = _old_daemon_with(harness, upgraded, "a")
        daemon = _daemon(harness)
        harness.supervisor.shutdown()
        assert not is_alive(daemon)
        assert not is_alive(pids["a"])
        wait_for(lambda: not harness.watchdogs(), "the old daemon's watchdog to exit")


class TestCommands:
    def test_status_apply_stop_apply(
        self, node: Node, upgraded: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """The commands an operator runs after upgrading noderole on a running node."""
        node.services += [sleeper("a"), sleeper("b", after=["a"])]
        _speak(upgraded, OLD)
        assert node.run("apply", "demo").exit_code == 0
        _speak(upgraded, NEW)
        old = int((tmp_path / "run/noderole/supervisor.pid").read_text().split()[0])
        before = {
            s["name"]: s["pid"] for s in json.loads(node.run("status", "--json").stdout)["services"]
        }

        status = node.run("status")
        assert "another version of noderole" in status.stderr
        assert "`noderole stop`" in status.stderr
        assert status.exit_code == 0  # the services run, supervised by the old daemon

        # Unchanged services are running: an apply says so. A changed one cannot be restarted.
        node.services[1] = sleeper("b", after=["a"], environment={"CHANGED": "1"})
        changed = node.run("apply", "demo")
        assert changed.exit_code == 1
        assert "a: already running" in changed.stdout
        assert "before noderole was upgraded" in changed.stdout

        refused = node.run("stop", "a")
        assert refused.exit_code == 10
        assert "cannot stop only a" in refused.stderr

        stopped = node.run("stop")
        assert stopped.exit_code == 0, stopped.output
        assert not is_alive(old)
        assert not any(map(is_alive, before.values()))

        again = node.run("apply", "demo")
        assert again.exit_code == 0, again.output
        new = int((tmp_path / "run/noderole/supervisor.pid").read_text().split()[0])
        assert new != old
        assert is_alive(new)
        assert os.path.exists(tmp_path / "run/b.pid")
