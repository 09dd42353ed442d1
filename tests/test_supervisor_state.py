"""The supervisor's state file: one schema; anything else is corrupt, moved aside, warned once.

Issue 12 part 5: valid JSON of the wrong shape used to crash ``status``, ``apply`` and ``stop``
with a traceback until the file was deleted.
"""

from __future__ import annotations

import json
import math
import os
import types
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

import noderole
from noderole.cli import cli
from noderole.cli._app import App
from noderole.root import NodeRoot
from noderole.supervisor import SchemaError, ServiceStatus
from noderole.supervisor._state import State, load_state, parse_state, write_state
from noderole.supervisor._status import ServiceState
from noderole.testing import end_node_processes
from tests.strategies import state_documents

BAD_SHAPES: dict[str, Any] = {
    "service-not-an-object": {"version": 1, "services": {"a": 1}},
    "services-a-list": {"version": 1, "services": []},
    "restarts-a-word": {"version": 1, "services": {"a": {"name": "a", "restarts": "lots"}}},
    "pid-huge": {"version": 1, "services": {"a": {"name": "a", "pid": 10**30}}},
    "state-unknown": {"version": 1, "services": {"a": {"name": "a", "state": "zombie"}}},
    "name-mismatch": {"version": 1, "services": {"a": {"name": "b"}}},
    "supervisor-a-string": {"version": 1, "services": {}, "supervisor": "me"},
}
BAD_TEXTS: dict[str, str] = {
    "nan": '{"version": 1, "services": {"a": {"name": "a", "started_at": NaN}}}',
    "infinity": '{"version": 1, "services": {"a": {"name": "a", "restarts": Infinity}}}',
    "digits": '{"version": 1, "services": {"a": {"name": "a", "pid": ' + "9" * 5000 + "}}}",
    "not-json": "{",
    "a-list": "[]",
}
ALL_BAD = {**{k: json.dumps(v) for k, v in BAD_SHAPES.items()}, **BAD_TEXTS}


def _corrupt_copies(directory: Path) -> list[Path]:
    return sorted(directory.glob("state.json.corrupt-*"))


class TestSchema:
    @pytest.mark.parametrize("text", ALL_BAD.values(), ids=ALL_BAD.keys())
    def test_bad_shape_is_a_schema_error(self, text: str) -> None:
        """Every bad shape is refused with SchemaError, never a TypeError or a crash."""
        with pytest.raises(SchemaError):
            parse_state(text.encode())

    def test_round_trip(self, tmp_path: Path) -> None:
        """What the daemon writes, the readers read back (one schema)."""
        status = ServiceStatus(name="a", state="crashed", restarts=3, reason="gave up", log="/l")
        path = tmp_path / "state.json"
        write_state(str(path), State(services={"a": status}))
        assert parse_state(path.read_bytes()).services == {"a": status}

    def test_status_from_wire_names_the_field(self) -> None:
        """A wrong field is named in the error."""
        with pytest.raises(SchemaError, match="restarts"):
            ServiceStatus.from_wire({"name": "a", "restarts": -1})
        with pytest.raises(SchemaError, match="started_at"):
            ServiceStatus.from_wire({"name": "a", "started_at": math.inf})


class TestLoad:
    @pytest.mark.parametrize("text", ALL_BAD.values(), ids=ALL_BAD.keys())
    def test_corrupt_file_is_moved_aside_and_warned_about_once(
        self, tmp_path: Path, text: str
    ) -> None:
        """A corrupt state is kept as state.json.corrupt-<UTC>, one warning, then silence."""
        path = tmp_path / "state.json"
        path.write_text(text)
        warnings: list[str] = []
        assert load_state(str(path), warnings.append) == State()
        [aside] = _corrupt_copies(tmp_path)
        assert aside.read_text() == text
        assert aside.name.endswith("Z")
        assert not path.exists()
        assert len(warnings) == 1
        assert str(aside) in warnings[0]
        assert load_state(str(path), warnings.append) == State()
        assert len(warnings) == 1

    @settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(document=state_documents())
    def test_fuzz_loader_never_crashes(self, tmp_path: Path, document: object) -> None:
        """Any JSON document loads as a state or is moved aside: never an exception."""
        path = tmp_path / "state.json"
        for old in _corrupt_copies(tmp_path):
            old.unlink()
        text = json.dumps(document)
        path.write_text(text)
        warnings: list[str] = []
        state = load_state(str(path), warnings.append)
        if path.exists():
            assert warnings == []
            for name, status in state.services.items():
                assert status.name == name
                assert isinstance(status.restarts, int)
                assert status.started_at is None or math.isfinite(status.started_at)
        else:
            assert state == State()
            assert len(warnings) == 1
            assert [p.read_text() for p in _corrupt_copies(tmp_path)] == [text]


# --------------------------------------------------------------------------- through the CLI


def _plugin() -> types.ModuleType:
    module = types.ModuleType("stateplugin")

    def noderole_services(node: Any) -> list[noderole.Service]:
        return [noderole.Service(name="db", roles=["back"], command=["/usr/bin/db"])]

    module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
    return module


@pytest.fixture
def root(tmp_path: Path) -> Any:
    db = tmp_path / "usr/bin/db"
    db.parent.mkdir(parents=True)
    db.write_text("#!/bin/sh\nexec sleep 1000\n")
    db.chmod(0o755)
    yield tmp_path
    assert end_node_processes(tmp_path) == []


def _run(root: Path, *args: str) -> Any:
    app = App(root=NodeRoot(root), plugin_objects=(("state", _plugin()),), autoload=False)
    return CliRunner().invoke(cli, list(args), obj=app)


def _plant(root: Path, text: str) -> Path:
    run_dir = root / "run/noderole"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "state.json").write_text(text)
    return run_dir


class TestThroughTheCli:
    @pytest.mark.parametrize("text", ALL_BAD.values(), ids=ALL_BAD.keys())
    def test_status_warns_once_and_goes_on(self, root: Path, text: str) -> None:
        """status on a corrupt state: one warning naming the copy, no traceback, a table."""
        run_dir = _plant(root, text)
        result = _run(root, "status", "back")
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        assert "Traceback" not in result.output
        [aside] = _corrupt_copies(run_dir)
        assert result.stderr.count("is corrupt") == 1
        assert str(aside) in result.stderr
        assert "db" in result.stdout
        again = _run(root, "status", "back")
        assert "is corrupt" not in again.stderr

    @pytest.mark.parametrize("text", ALL_BAD.values(), ids=ALL_BAD.keys())
    def test_apply_starts_the_role_anyway(self, root: Path, text: str) -> None:
        """apply on a corrupt state starts the service; the daemon rewrites a valid state."""
        run_dir = _plant(root, text)
        result = _run(root, "apply", "back")
        assert result.exit_code == 0, result.output
        assert len(_corrupt_copies(run_dir)) == 1
        state = parse_state((run_dir / "state.json").read_bytes())
        assert state.services["db"].state == "running"
        stopped = _run(root, "stop", "back")
        assert stopped.exit_code == 0, stopped.output


class TestLeftovers:
    @pytest.mark.parametrize("state", ["backoff", "crashed", "stopped"])
    def test_a_service_without_a_process_leaves_its_old_group_number_alone(
        self, state: ServiceState
    ) -> None:
        """A daemon killed while a service waits to respawn: its state still names the dead
        process, whose group the daemon killed as it exited. The watchdog, or the next daemon,
        SIGKILLed any group of that number whose leader had gone and whose members started
        later: an unrelated program's, once the number was reused. Only a service recorded
        with a process has a group left to end."""
        import subprocess
        import time

        from noderole.supervisor._proc import is_alive, proc_stat
        from noderole.supervisor._state import leftover_groups

        # An unrelated group whose leader is gone and whose member lives on: the number a
        # reused pid of the dead service could lead.
        script = "sleep 1000 >/dev/null 2>&1 & echo $!"
        done = subprocess.run(["setsid", "sh", "-c", script], capture_output=True, text=True)
        member = int(done.stdout)
        try:
            group = os.getpgid(member)
            found = proc_stat(member)
            assert found is not None
            assert not is_alive(group)
            older = found.start_ticks - 100  # the dead service started before it
            recorded = ServiceStatus(
                name="a", state=state, pid=group, start_ticks=older, started_at=time.time()
            )
            assert leftover_groups(State(services={"a": recorded})) == {}
            running = ServiceStatus(
                name="a", state="running", pid=group, start_ticks=older, started_at=time.time()
            )
            assert leftover_groups(State(services={"a": running})) == {"a": (group, [member])}
        finally:
            os.kill(member, 9)
