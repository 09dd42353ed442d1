"""The injectable clock: the real one blocks, the fake one moves only when told or slept on."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from noderole.clock import Clock, FakeClock, SystemClock


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    yield read_end, write_end
    os.close(read_end)
    os.close(write_end)


class TestSystemClock:
    def test_is_a_clock(self) -> None:
        """SystemClock satisfies the Clock protocol, wait_readable included."""
        assert isinstance(SystemClock(), Clock)

    def test_monotonic_never_goes_back(self) -> None:
        """Two readings in a row do not decrease."""
        clock = SystemClock()
        first = clock.monotonic()
        assert clock.monotonic() >= first

    def test_wait_readable_true_when_data_waits(self, pipe: tuple[int, int]) -> None:
        """A descriptor with data is reported readable."""
        os.write(pipe[1], b"x")
        assert SystemClock().wait_readable(pipe[0], 5.0) is True

    def test_wait_readable_false_on_timeout(self, pipe: tuple[int, int]) -> None:
        """An empty pipe is not readable when the timeout ends."""
        assert SystemClock().wait_readable(pipe[0], 0.0) is False

    def test_wait_readable_wakes_on_data_from_another_thread(self, pipe: tuple[int, int]) -> None:
        """Data written while blocked wakes the wait before a long timeout."""
        timer = threading.Timer(0.05, os.write, args=(pipe[1], b"x"))
        timer.start()
        try:
            assert SystemClock().wait_readable(pipe[0], 60.0) is True
        finally:
            timer.cancel()

    def test_wait_readable_without_fd_is_a_sleep(self) -> None:
        """With no descriptor, wait_readable sleeps and returns False."""
        assert SystemClock().wait_readable(None, 0.001) is False


class TestFakeClock:
    def test_is_a_clock(self) -> None:
        """FakeClock satisfies the Clock protocol."""
        assert isinstance(FakeClock(), Clock)

    def test_sleep_advances_instantly(self) -> None:
        """sleep(s) moves monotonic and wall time by s."""
        clock = FakeClock(start=10.0, wall=100.0)
        clock.sleep(2.5)
        assert (clock.monotonic(), clock.time()) == (12.5, 102.5)

    def test_negative_sleep_does_not_go_back(self) -> None:
        """A negative sleep leaves the clock where it is."""
        clock = FakeClock(start=10.0)
        clock.sleep(-1)
        assert clock.monotonic() == 10.0

    def test_advance(self) -> None:
        """advance(s) moves the clock by s."""
        clock = FakeClock(start=0.0)
        clock.advance(120)
        assert clock.monotonic() == 120.0

    def test_wait_readable_without_data_advances_by_timeout(self, pipe: tuple[int, int]) -> None:
        """Nothing to read: the fake clock jumps by the timeout and reports False."""
        clock = FakeClock(start=0.0)
        assert clock.wait_readable(pipe[0], 1.5) is False
        assert clock.monotonic() == 1.5

    def test_wait_readable_with_data_does_not_advance(self, pipe: tuple[int, int]) -> None:
        """Data already there: True at once, and time stands still."""
        clock = FakeClock(start=0.0)
        os.write(pipe[1], b"x")
        assert clock.wait_readable(pipe[0], 1.5) is True
        assert clock.monotonic() == 0.0

    def test_wait_readable_without_fd_advances(self) -> None:
        """With no descriptor, wait_readable is a fake sleep."""
        clock = FakeClock(start=0.0)
        assert clock.wait_readable(None, 0.25) is False
        assert clock.monotonic() == 0.25

    def test_threads_share_one_timeline(self) -> None:
        """Sleeps from several threads add up on one clock."""
        clock = FakeClock(start=0.0)
        threads = [threading.Thread(target=clock.sleep, args=(1.0,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert clock.monotonic() == 8.0
