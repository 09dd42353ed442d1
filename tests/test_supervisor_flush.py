"""The daemon's state writes: when (coalesced, or at once when starts wait), how (kept encodings).

A start is answered only once a state write covers it. The writes are spaced (twice the last
one's duration) so that a burst of changes is written together; but when every client in flight
waits for that write and the loop has nothing else to do, waiting out the gap only idles the
daemon. These tests drive a :class:`Daemon` in-process, with the gap set far into the future.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noderole.supervisor._daemon import FLUSH_GAP_UNWAITED, Daemon
from noderole.supervisor._proc import boot_id, kill_group
from noderole.supervisor._spec import ProcessSpec, ReadinessSpec
from noderole.supervisor._state import (
    STATE_VERSION,
    Encoded,
    State,
    encode_state,
    load_state,
    parse_state,
)
from noderole.supervisor._status import ServiceStatus
from noderole.supervisor._unit import Unit
from noderole.supervisor.probes import PathProbe, TcpProbe
from tests.supervisor_fixtures import Harness, harness, wait_for

__all__ = ["harness"]  # the fixture, imported for pytest


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    run_dir = tmp_path / "run/noderole"
    run_dir.mkdir(parents=True)
    made = Daemon(str(run_dir))
    made.next_flush = time.monotonic() + 3600.0  # a write has just been made: a long gap
    try:
        yield made
    finally:
        made.server.close()


class TestFlushWhenIdle:
    def test_a_write_waited_for_is_made_at_once_when_idle(self, daemon: Daemon) -> None:
        """A change a client waits for is written at once when nothing else is ready to run."""
        answered: list[bool] = []
        daemon.persist()
        daemon.after_flush(lambda: answered.append(True))
        daemon.flush()
        assert answered == [True]
        assert not daemon.dirty
        assert os.path.exists(daemon.state_path)

    def test_a_change_nobody_waits_for_keeps_the_gap(self, daemon: Daemon) -> None:
        """A change no client waits for (a respawn) is written once the gap has passed."""
        daemon.persist()
        daemon.flush()
        assert daemon.dirty
        assert not os.path.exists(daemon.state_path)
        assert daemon.flush_timer is not None

    def test_a_busy_loop_keeps_coalescing(self, daemon: Daemon) -> None:
        """While another event is ready (a request arriving), the write still waits for the gap."""
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            os.write(w, b"x")
            daemon.loop.add_reader(r, lambda: None)
            answered: list[bool] = []
            daemon.persist()
            daemon.after_flush(lambda: answered.append(True))
            daemon.flush()
            assert answered == []
            assert daemon.dirty
        finally:
            daemon.loop.remove_reader(r)
            os.close(r)
            os.close(w)

    def test_a_due_timer_counts_as_busy(self, daemon: Daemon) -> None:
        """A timer that is due (a respawn, a stop's timeout) also keeps the write coalesced."""
        fired: list[bool] = []
        daemon.loop.call_later(0.0, lambda: fired.append(True))
        answered: list[bool] = []
        daemon.persist()
        daemon.after_flush(lambda: answered.append(True))
        daemon.flush()
        assert (answered, fired) == ([], [])
        assert daemon.loop.busy()


_statuses = st.builds(
    ServiceStatus,
    name=st.sampled_from(["a", "b", "é", 'q"uote']),
    state=st.sampled_from(["running", "ready", "backoff", "crashed", "stopped"]),
    pid=st.none() | st.integers(2, 4_000_000),
    start_ticks=st.none() | st.integers(0, 2**40),
    started_at=st.none() | st.floats(0, 2e9),
    restarts=st.integers(0, 1000),
    reason=st.text(max_size=8),
)


class TestReadinessAfterTheAnswer:
    """A start's first readiness attempt waits for the write that answers the start: an
    attempt may import on first use (http.client: ~20 ms holding the GIL), which held up the
    write and the answer apply waits for."""

    @staticmethod
    def _start(daemon: Daemon, tmp_path: Path, *, wait_ready: bool) -> list[dict[str, Any]]:
        answers: list[dict[str, Any]] = []
        spec = ProcessSpec(
            name="a",
            argv=("/bin/sleep", "1000"),
            readiness=ReadinessSpec(probe=TcpProbe(host="127.0.0.1", port=1), timeout=30.0),
        )
        daemon.start_new(spec, wait_ready, "", answers.append)
        return answers

    @staticmethod
    def _attempting(daemon: Daemon) -> bool:
        check = daemon.units["a"].check
        assert check is not None
        return check.thread is not None

    @staticmethod
    def _end(daemon: Daemon) -> None:
        for unit in daemon.units.values():
            if unit.check is not None:
                unit.check.close()
            if unit.popen is not None:
                kill_group(unit.popen.pid, signal.SIGKILL)
                unit.popen.wait()
            if unit.pidfd is not None:
                os.close(unit.pidfd)

    def test_first_attempt_after_the_answer(self, daemon: Daemon, tmp_path: Path) -> None:
        """No attempt runs before the state write answers; the loop's next turn starts one."""
        try:
            answers = self._start(daemon, tmp_path, wait_ready=False)
            assert not self._attempting(daemon)
            daemon.flush()  # idle, and a client waits: written at once, answered
            assert [a["statuses"][0]["state"] for a in answers] == ["running"]
            assert not self._attempting(daemon)
            daemon.loop.run_once(0.0)
            assert self._attempting(daemon)
        finally:
            self._end(daemon)

    def test_a_start_answered_once_ready_looks_at_once(
        self, daemon: Daemon, tmp_path: Path
    ) -> None:
        """With wait_ready the answer is the readiness itself: the first attempt starts now."""
        try:
            answers = self._start(daemon, tmp_path, wait_ready=True)
            assert answers == []
            assert self._attempting(daemon)
        finally:
            self._end(daemon)


class TestAnswersAfterTheWrite:
    """A start or stop is answered once the state file records what the answer says: a reader
    of the file (a client whose daemon does not answer, the watchdog) never sees a state older
    than an answer already given. Before, a stop was answered as its last process ended, the
    write left to the next gap: right after `stop a b`, state.json still said b was ready.
    The writes are kept far apart here (next_flush an hour away), so only a write made for
    the answer can reach the file before it."""

    Seen = list[tuple[dict[str, Any], State]]

    @staticmethod
    def _recorded(daemon: Daemon) -> State:
        return load_state(daemon.state_path, lambda message: None)

    def _noting(self, daemon: Daemon, seen: Seen) -> Any:
        """A reply that notes the answer with what the state file said as it was given."""
        return lambda answer: seen.append((answer, self._recorded(daemon)))

    @staticmethod
    def _run_until(daemon: Daemon, condition: Any, what: str) -> None:
        """Turn the daemon's loop (and its writes, as run() makes them) until ``condition``."""
        deadline = time.monotonic() + 15.0
        while not condition():
            assert time.monotonic() < deadline, f"no {what} within 15s"
            daemon.loop.run_once(0.02)
            daemon.flush()

    @staticmethod
    def _spec(tmp_path: Path) -> ProcessSpec:
        flag = tmp_path / "ready-flag"
        flag.write_text("")
        return ProcessSpec(
            name="a",
            argv=("/bin/sleep", "1000"),
            readiness=ReadinessSpec(probe=PathProbe(paths=(str(flag),)), timeout=30.0),
            fingerprint="f1",
        )

    def test_a_stop_is_answered_once_the_file_says_stopped(
        self, daemon: Daemon, tmp_path: Path
    ) -> None:
        started: list[dict[str, Any]] = []
        seen: TestAnswersAfterTheWrite.Seen = []
        try:
            daemon.start_new(self._spec(tmp_path), False, "", started.append)
            self._run_until(daemon, lambda: started, "answer to the start")
            assert self._recorded(daemon).services["a"].state == "running"
            daemon.next_flush = time.monotonic() + 3600.0
            daemon.op_stop({"names": ["a"]}, self._noting(daemon, seen))
            self._run_until(daemon, lambda: seen, "answer to the stop")
        finally:
            TestReadinessAfterTheAnswer._end(daemon)
        [(answer, recorded)] = seen
        assert [s["state"] for s in answer["statuses"]] == ["stopped"]
        assert recorded.services["a"].state == "stopped"

    def test_already_running_is_answered_once_the_file_says_so(
        self, daemon: Daemon, tmp_path: Path
    ) -> None:
        """The service became ready after the last write: a start finding it running answers
        "ready" once the file says ready too."""
        spec = self._spec(tmp_path)
        started: list[dict[str, Any]] = []
        seen: TestAnswersAfterTheWrite.Seen = []
        try:
            daemon.start_new(spec, False, "", started.append)
            self._run_until(daemon, lambda: started, "answer to the start")
            daemon.next_flush = time.monotonic() + 3600.0
            self._run_until(daemon, lambda: daemon.units["a"].state == "ready", "readiness")
            assert self._recorded(daemon).services["a"].state == "running"  # not written yet
            daemon.start(spec, False, False, self._noting(daemon, seen))
            self._run_until(daemon, lambda: seen, "answer to the second start")
        finally:
            TestReadinessAfterTheAnswer._end(daemon)
        [(answer, recorded)] = seen
        [status] = answer["statuses"]
        assert (status["state"], status["already_running"]) == ("ready", True)
        assert recorded.services["a"].state == "ready"

    def test_a_start_waiting_for_readiness_is_answered_once_the_file_says_ready(
        self, daemon: Daemon, tmp_path: Path
    ) -> None:
        """Its check fails at first (no flag yet), then passes: the answer waits for the write."""
        spec = self._spec(tmp_path)
        flag = tmp_path / "ready-flag"
        flag.unlink()
        seen: TestAnswersAfterTheWrite.Seen = []
        try:
            daemon.start_new(spec, True, "", self._noting(daemon, seen))
            unit = daemon.units["a"]
            self._run_until(daemon, lambda: unit.check is not None, "the readiness check")
            assert (unit.state, seen) == ("running", [])
            flag.write_text("")
            self._run_until(daemon, lambda: seen, "answer to the start")
        finally:
            TestReadinessAfterTheAnswer._end(daemon)
        [(answer, recorded)] = seen
        assert [s["state"] for s in answer["statuses"]] == ["ready"]
        assert "a" in recorded.services, "the state file was not written before the answer"
        assert recorded.services["a"].state == "ready"


class TestEncodedState:
    @settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
    @given(first=st.lists(_statuses, max_size=4), second=st.lists(_statuses, max_size=4))
    def test_kept_encodings_give_the_same_bytes(
        self, first: list[ServiceStatus], second: list[ServiceStatus]
    ) -> None:
        """With the encodings kept from an earlier write, a state encodes to the very bytes of
        one json.dumps of the whole document, and reads back the same."""
        encoded: Encoded = {}
        for statuses in (first, second, first):
            state = State(
                services={s.name: s for s in statuses}, supervisor_pid=7, supervisor_ticks=9
            )
            whole = {
                "version": STATE_VERSION,
                "boot_id": boot_id(),
                "supervisor": {"pid": 7, "start_ticks": 9},
                "services": {n: s.to_wire() for n, s in state.services.items()},
            }
            raw = encode_state(state, encoded)
            assert raw == json.dumps(whole, separators=(",", ":"), allow_nan=False).encode()
            assert parse_state(raw).services == state.services
            assert sorted(encoded) == sorted(map(id, state.services.values()))


class TestUnwaitedGap:
    """Changes no client waits for (respawns, exits) are written at most every
    FLUSH_GAP_UNWAITED: 200 services crash-looping changed the state hundreds of times a second,
    and writing it every 20 ms was a quarter of the daemon's time."""

    def test_a_change_nobody_waits_for_waits_the_longer_gap(self, daemon: Daemon) -> None:
        now = time.monotonic()
        daemon.next_flush = now - 1.0  # the short gap has passed
        daemon.last_flush = now  # but a write was just made
        daemon.persist()
        daemon.flush()
        deferred = daemon.dirty
        assert deferred
        assert not os.path.exists(daemon.state_path)
        timer = daemon.flush_timer
        assert timer is not None
        # Due when the longer gap ends, not later: the loop's timer makes the write.
        assert now + FLUSH_GAP_UNWAITED - 0.001 <= timer.when <= now + FLUSH_GAP_UNWAITED + 0.5
        daemon.last_flush = now - FLUSH_GAP_UNWAITED  # the gap has passed
        daemon.flush()
        assert not daemon.dirty
        assert os.path.exists(daemon.state_path)
        assert timer.cancelled  # the write made the pending timer moot

    def test_a_waiter_is_answered_after_the_shorter_gap(self, daemon: Daemon) -> None:
        """A start waiting for the write does not wait out the longer gap: past the short one,
        the write is made at once; before it, the timer is brought forward to it."""
        now = time.monotonic()
        daemon.next_flush = now + 0.05
        daemon.last_flush = now
        daemon.persist()
        daemon.flush()
        later = daemon.flush_timer
        assert later is not None
        assert later.when >= now + FLUSH_GAP_UNWAITED - 0.001
        answered: list[bool] = []
        daemon.loop.call_later(0.0, lambda: None)  # the loop is busy: no write at once
        daemon.after_flush(lambda: answered.append(True))
        daemon.flush()
        sooner = daemon.flush_timer
        assert sooner is not None
        assert later.cancelled
        assert sooner.when <= daemon.next_flush + 0.001
        assert answered == []
        daemon.next_flush = time.monotonic() - 1.0  # the short gap has passed
        daemon.flush()
        assert answered == [True]
        assert not daemon.dirty
        assert os.path.exists(daemon.state_path)
        assert daemon.flush_timer is None


class TestStatusObjects:
    def test_an_unchanged_service_gives_the_same_status_object(self, daemon: Daemon) -> None:
        """The state write reuses a status's JSON by its identity: a unit hands the same status
        object while nothing it shows changed, and a new one when anything did."""
        unit = Unit(ProcessSpec(name="a", argv=("/bin/true",), fingerprint="f1"), daemon)
        first = unit.status()
        assert unit.status() is first
        unit.restarts += 1
        second = unit.status()
        assert second is not first
        assert second.restarts == 1
        assert unit.status() is second
        unit.spec = ProcessSpec(name="a", argv=("/bin/true",), fingerprint="f2")
        third = unit.status()
        assert third is not second
        assert third.fingerprint == "f2"
        changes = {
            "state": "backoff",
            "pid": 42,
            "start_ticks": 7,
            "started_at": 1.5,
            "last_exit": "exit 3",
            "reason": "respawning",
        }
        for field, value in changes.items():
            before = unit.status()
            setattr(unit, field, value)
            assert unit.status() is not before, field
            assert unit.status().to_wire()[field] == value


class TestUnwaitedWritesCatchUp:
    def test_a_respawn_reaches_the_state_file_without_another_event(self, harness: Harness) -> None:
        """A respawn no client waits for is written after the longer gap by the loop's timer,
        with nothing else happening: the file never keeps a pid that is gone."""
        first = harness.supervisor.start(harness.spec("a", "exec sleep 1000"))
        assert first.pid is not None
        respawned = harness.kill_and_await_respawn("a", first.pid)

        def recorded() -> int | None:
            state = parse_state(harness.supervisor.state_path.read_bytes())
            return state.services["a"].pid

        assert wait_for(lambda: recorded() == respawned.pid, "the state file", timeout=5.0)
