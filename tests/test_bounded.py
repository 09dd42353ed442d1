"""noderole.bounded: plugin code in a reused worker thread, each call bounded in time."""

from __future__ import annotations

import _thread
import threading
from collections.abc import Iterator

import pytest

from noderole.bounded import run_bounded

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
        assert returned is not None
        assert (returned.value, returned.error) == (42, None)

        def fail() -> None:
            raise SystemExit(3)

        raised = run_bounded(fail, name="fail", timeout=FOREVER)
        assert raised is not None
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

        assert run_bounded(hang, name="hang", timeout=0.05) is None
        assert _ident() != late.ident
        assert late.is_alive()
        assert late.name == "hang"
        gate.set()
        assert finished.wait(FOREVER)
        late.join(FOREVER)
        assert not late.is_alive()

    def test_a_call_from_a_worker_goes_to_its_own_worker(self) -> None:
        """A hook calling other plugins' hooks: the nested call runs in a third thread and the
        outer call does not wait on itself."""
        seen: list[int] = []

        def outer() -> None:
            seen.append(threading.get_ident())
            run_bounded(lambda: seen.append(threading.get_ident()), name="inner", timeout=FOREVER)

        assert run_bounded(outer, name="outer", timeout=FOREVER)
        assert len(set(seen)) == 2
        assert threading.get_ident() not in seen

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
        reused. (The SIGINT is simulated: CPython may notice a real one only at the bound, if
        it lands just before the wait begins.)"""

        def interrupt() -> None:
            _thread.interrupt_main()
            gate.wait()

        busy = _ident()
        with pytest.raises(KeyboardInterrupt):
            run_bounded(interrupt, name="interrupt", timeout=0.05)
        assert _ident() != busy
