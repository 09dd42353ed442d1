"""noderole.bounded: plugin code in a reused worker thread, each call bounded in time."""

from __future__ import annotations

import _thread
import functools
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from noderole.bounded import Entry, Late, Outcome, run_bounded, run_bounded_each

FOREVER = 30.0
"""A bound no call here comes near (a call that must finish does so at once)."""


def _thread_of(ident: int) -> threading.Thread:
    return next(t for t in threading.enumerate() if t.ident == ident)


def _ident() -> int:
    """The worker thread a call ran in."""
    seen: list[int] = []
    assert run_bounded(lambda: seen.append(threading.get_ident()), name="probe", timeout=FOREVER)
    return seen[0]


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event a late call waits on; set at the end of the test whatever happens."""
    event = threading.Event()
    yield event
    event.set()


class TestRunBounded:
    def test_calls_run_in_one_reused_worker(self) -> None:
        """Each call runs in a thread other than the caller's, the same one call after call, a
        daemon bearing the call's name while it runs."""
        names: list[tuple[str, bool]] = []

        def remember() -> None:
            current = threading.current_thread()
            names.append((current.name, current.daemon))

        first = _ident()
        assert first != threading.get_ident()
        assert run_bounded(remember, name="plugin:hook", timeout=FOREVER)
        assert _ident() == first
        assert names == [("plugin:hook", True)]
        assert _thread_of(first).name == "noderole worker"

    def test_result_and_error_are_handed_back_and_the_worker_goes_on(self) -> None:
        """The call's value, or what it raised (a plugin's SystemExit too), comes back in the
        outcome, never raised in either thread; the worker serves the next call."""
        before = _ident()
        returned = run_bounded(lambda: 42, name="value", timeout=FOREVER)
        assert isinstance(returned, Outcome)
        assert (returned.value, returned.error) == (42, None)

        def fail() -> None:
            raise SystemExit(3)

        raised = run_bounded(fail, name="fail", timeout=FOREVER)
        assert isinstance(raised, Outcome)
        assert isinstance(raised.error, SystemExit)
        assert raised.error.code == 3
        assert _ident() == before

    def test_a_late_call_is_left_and_the_next_gets_a_new_worker(
        self, gate: threading.Event
    ) -> None:
        """A call still running at its bound returns False; it goes on in the background, the
        next call runs in a new worker, and the left one ends once the late call returns."""
        late = _thread_of(_ident())
        finished = threading.Event()

        def hang() -> None:
            gate.wait()
            finished.set()

        assert isinstance(run_bounded(hang, name="hang", timeout=0.05), Late)
        assert _ident() != late.ident
        assert late.is_alive()
        assert late.name == "hang"
        gate.set()
        assert finished.wait(FOREVER)
        late.join(FOREVER)
        assert not late.is_alive()

    def test_a_nested_call_the_outer_bound_covers_runs_in_the_worker_itself(self) -> None:
        """A hook calling other plugins' hooks with the same timeout: the outer call's bound comes
        first, so the nested call runs right there (no third thread, no hand-over), bearing its
        own name meanwhile and the outer's again after; what it raises stays in its outcome."""
        seen: list[tuple[int, str]] = []

        def note() -> None:
            seen.append((threading.get_ident(), threading.current_thread().name))

        def fail() -> None:
            raise SystemExit(4)

        def outer() -> None:
            note()
            inner = run_bounded(note, name="inner", timeout=FOREVER)
            assert isinstance(inner, Outcome)
            assert inner.error is None
            unbounded = run_bounded(note, name="unbounded", timeout=None)
            assert isinstance(unbounded, Outcome)
            failed = run_bounded(fail, name="fail", timeout=FOREVER)
            assert isinstance(failed, Outcome)
            assert isinstance(failed.error, SystemExit)
            note()

        outcome = run_bounded(outer, name="outer", timeout=FOREVER)
        assert isinstance(outcome, Outcome)
        assert outcome.error is None  # the assertions inside held
        assert len({ident for ident, _ in seen}) == 1
        assert threading.get_ident() not in {ident for ident, _ in seen}
        assert [name for _, name in seen] == ["outer", "inner", "unbounded", "outer"]

    def test_a_nested_call_with_a_shorter_bound_goes_to_the_workers_own_worker(
        self, gate: threading.Event
    ) -> None:
        """A nested call whose bound comes before the outer's runs in a third thread, so its
        own bound holds: a hang there is reported to the outer call, which goes on."""
        seen: list[int] = []
        late: list[object] = []

        def outer() -> None:
            seen.append(threading.get_ident())
            run_bounded(lambda: seen.append(threading.get_ident()), name="inner", timeout=1.0)
            late.append(run_bounded(gate.wait, name="hang", timeout=0.05))

        outcome = run_bounded(outer, name="outer", timeout=FOREVER)
        assert isinstance(outcome, Outcome)
        assert outcome.error is None
        assert len(set(seen)) == 2
        assert threading.get_ident() not in seen
        assert [type(entry) for entry in late] == [Late]

    def test_a_late_call_names_what_its_worker_was_running(self, gate: threading.Event) -> None:
        """Late.running: the late call, then the nested call it was waiting on in the same
        worker, where the time went."""
        late = run_bounded(
            lambda: run_bounded(gate.wait, name="inner", timeout=FOREVER),
            name="outer",
            timeout=0.5,  # time enough, on a loaded machine, to be inside the nested call
        )
        assert isinstance(late, Late)
        assert late.running == ("outer", "inner")
        assert isinstance(run_bounded(gate.wait, name="alone", timeout=0.05), Late)
        assert run_bounded_each([(gate.wait, "alone")], timeout=0.05)[0].running == ("alone",)  # type: ignore[union-attr]

    def test_an_unbounded_outer_call_leaves_a_nested_call_its_bound(
        self, gate: threading.Event
    ) -> None:
        """No bound on the outer call covers nothing: the nested call's bound still holds."""
        late: list[object] = []
        outcome = run_bounded(
            lambda: late.append(run_bounded(gate.wait, name="hang", timeout=0.05)),
            name="outer",
            timeout=None,
        )
        assert isinstance(outcome, Outcome)
        assert outcome.error is None
        assert [type(entry) for entry in late] == [Late]

    def test_each_calling_thread_has_its_own_worker_which_ends_with_it(self) -> None:
        """Two threads calling at once do not share a worker; a worker ends with its caller."""
        both = threading.Barrier(2)
        workers: dict[str, threading.Thread] = {}

        def caller(label: str) -> None:
            def inside() -> None:
                workers[label] = threading.current_thread()
                both.wait(FOREVER)  # both calls are running at the same moment

            assert run_bounded(inside, name=label, timeout=FOREVER)

        threads = [threading.Thread(target=caller, args=(label,)) for label in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(FOREVER)
        assert workers["a"] is not workers["b"]
        for worker in workers.values():
            worker.join(FOREVER)
            assert not worker.is_alive()

    def test_ctrl_c_while_waiting_drops_the_worker(self, gate: threading.Event) -> None:
        """Ctrl-C while a call runs propagates to the caller; the still-busy worker is not
        reused. (The SIGINT is simulated here; a real one the worker thread takes is the test
        below.)"""

        def interrupt() -> None:
            _thread.interrupt_main()
            gate.wait()

        busy = _ident()
        with pytest.raises(KeyboardInterrupt):
            # The caller looks at least every LOOK seconds: the bound is only long enough for a
            # worker on a loaded machine to have raised the simulated SIGINT by then.
            run_bounded(interrupt, name="interrupt", timeout=0.5)
        assert _ident() != busy

    @pytest.mark.parametrize("timeout", [None, 300.0], ids=["unbounded", "long bound"])
    def test_a_signal_the_worker_takes_still_reaches_the_caller(
        self, gate: threading.Event, timeout: float | None
    ) -> None:
        """A real SIGINT the kernel gives the worker thread (any thread may take a
        process-directed signal): Python runs its handler in the main thread, whose one long
        wait for the worker nothing woke. The Ctrl-C waited until the call ended: for good
        without a bound. The caller now waits in short looks."""
        unheard: list[str] = []

        def give_up_waiting() -> None:
            if not gate.wait(15):
                unheard.append("the caller did not hear the signal")
                gate.set()  # let the call end, and the test

        def signalled() -> None:
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # to this thread
            gate.wait()

        watcher = threading.Thread(target=give_up_waiting)
        watcher.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                run_bounded(signalled, name="signalled", timeout=timeout)
        finally:
            gate.set()
            watcher.join(FOREVER)
        assert unheard == []


class TestPatience:
    def test_impatient_is_called_once_from_the_caller_when_the_call_runs_on(
        self, gate: threading.Event
    ) -> None:
        """A call still running after ``patience`` gets ``impatient()`` called once, in the
        calling thread; the call is still waited for and its outcome handed back."""
        seen: list[threading.Thread] = []

        def impatient() -> None:
            seen.append(threading.current_thread())
            gate.set()  # the call can finish only once told the caller grew impatient

        outcome = run_bounded(
            lambda: gate.wait(FOREVER) and "done",
            name="slow",
            timeout=FOREVER,
            patience=0.01,
            impatient=impatient,
        )
        assert isinstance(outcome, Outcome)
        assert outcome.value == "done"
        assert seen == [threading.current_thread()]

    @pytest.mark.parametrize("timeout", [FOREVER, None])
    def test_a_quick_call_leaves_impatient_uncalled(self, timeout: float | None) -> None:
        called: list[bool] = []
        outcome = run_bounded(
            lambda: 7,
            name="quick",
            timeout=timeout,
            patience=FOREVER,
            impatient=lambda: called.append(True),
        )
        assert isinstance(outcome, Outcome)
        assert outcome.value == 7
        assert called == []

    def test_an_impatient_that_raises_changes_nothing(self, gate: threading.Event) -> None:
        def impatient() -> None:
            gate.set()
            raise RuntimeError("cannot start a thread")

        outcome = run_bounded(
            lambda: gate.wait(FOREVER) and 1,
            name="slow",
            timeout=FOREVER,
            patience=0.01,
            impatient=impatient,
        )
        assert isinstance(outcome, Outcome)
        assert outcome.value == 1

    def test_patience_never_outlasts_the_bound(self, gate: threading.Event) -> None:
        """A bound shorter than the patience still ends the wait at the bound: Late."""
        outcome = run_bounded(
            lambda: gate.wait(FOREVER),
            name="hung",
            timeout=0.05,
            patience=FOREVER,
            impatient=lambda: None,
        )
        assert isinstance(outcome, Late)


class TestRunBoundedEach:
    def test_the_calls_run_in_order_in_one_hand_over(self) -> None:
        """One worker, in turn, each bearing its name; every value and error handed back."""
        seen: list[tuple[int, str]] = []

        def call(value: int) -> int:
            seen.append((threading.get_ident(), threading.current_thread().name))
            if value == 2:
                raise ValueError(value)
            return value

        entries = run_bounded_each(
            [(functools.partial(call, v), f"call {v}") for v in (1, 2, 3)], timeout=FOREVER
        )
        assert [name for _, name in seen] == ["call 1", "call 2", "call 3"]
        assert {ident for ident, _ in seen} == {_ident()}
        assert [(e.value, type(e.error)) for e in entries if isinstance(e, Outcome)] == [
            (1, type(None)),
            (None, ValueError),
            (3, type(None)),
        ]

    def test_each_call_is_bounded_from_its_own_start(self) -> None:
        """Four calls of 0.2 s under a 0.6 s bound: together they take longer than the bound,
        and none is late."""
        entries = run_bounded_each(
            [(lambda: time.sleep(0.2), f"nap {i}") for i in range(4)], timeout=0.6
        )
        assert len(entries) == 4
        assert all(isinstance(entry, Outcome) for entry in entries)

    def test_a_late_call_is_left_and_the_rest_run_in_a_new_worker(
        self, gate: threading.Event
    ) -> None:
        """The late call gets Late and keeps its thread; the calls after it still run, once
        each, in a new worker; the late call's outcome never shows up in the list."""
        ran: list[tuple[str, int]] = []

        def note(label: str) -> str:
            ran.append((label, threading.get_ident()))
            return label

        first = _ident()
        entries = run_bounded_each(
            [
                (lambda: note("before"), "before"),
                (gate.wait, "hang"),
                (lambda: note("after"), "after"),
                (lambda: note("last"), "last"),
            ],
            timeout=0.5,  # the calls that return must, on a loaded machine too
        )
        gate.set()
        time.sleep(0.1)  # the late call has returned: its worker takes nothing after it
        assert [None if isinstance(e, Late) else e.value for e in entries] == [
            "before",
            None,
            "after",
            "last",
        ]
        assert ran[0] == ("before", first)
        assert [label for label, _ in ran] == ["before", "after", "last"]
        assert {ident for _, ident in ran[1:]} == {_ident()} != {first}

    def test_stop_ends_the_sequence_at_the_first_entry_it_names(
        self, gate: threading.Event
    ) -> None:
        """A caller that gives up at the first failure: no call after it runs, whether the
        failure was raised or late."""
        ran: list[str] = []

        def fail() -> None:
            ran.append("fail")
            raise RuntimeError("no")

        def failed(entry: Entry) -> bool:
            return isinstance(entry, Late) or entry.error is not None

        entries = run_bounded_each(
            [(fail, "fail"), (lambda: ran.append("never"), "never")], timeout=FOREVER, stop=failed
        )
        assert len(entries) == 1
        assert ran == ["fail"]
        entries = run_bounded_each(
            [(gate.wait, "hang"), (lambda: ran.append("never"), "never")], timeout=0.05, stop=failed
        )
        gate.set()
        assert [type(entry) for entry in entries] == [Late]
        time.sleep(0.1)  # the late call has returned: its worker still takes nothing after it
        assert ran == ["fail"]

    def test_a_stop_that_raises_stops(self) -> None:
        """A predicate tripping on a plugin's object stops the sequence (the caller checks)."""

        def broken(entry: Entry) -> bool:
            raise AttributeError("odd object")

        entries = run_bounded_each(
            [(lambda: 1, "one"), (lambda: 2, "two")], timeout=FOREVER, stop=broken
        )
        assert [e.value for e in entries if isinstance(e, Outcome)] == [1]

    def test_ctrl_c_leaves_the_rest_of_the_sequence_unrun(self, gate: threading.Event) -> None:
        """Ctrl-C while the first call runs: the calls after it never run, in any worker. (As
        above, the simulated SIGINT is noticed at the bound at the latest.)"""
        ran: list[str] = []

        def interrupt() -> None:
            _thread.interrupt_main()
            gate.wait()

        with pytest.raises(KeyboardInterrupt):
            run_bounded_each(
                [(interrupt, "interrupt"), (lambda: ran.append("after"), "after")], timeout=0.5
            )
        gate.set()
        time.sleep(0.1)
        assert ran == []
