"""Respawn arithmetic of the native supervisor: pure numbers, no processes, no clock."""

from __future__ import annotations

from noderole.supervisor._policy import RespawnPolicy, healthy_after


def _policy(
    delay: float = 1.0, max_: int = 0, period: float | None = None, backoff: float | None = None
) -> RespawnPolicy:
    return RespawnPolicy(
        respawn_delay=delay, respawn_max=max_, respawn_period=period, backoff_max=backoff
    )


class TestRespawnLimit:
    def test_gives_up_after_exactly_respawn_max(self) -> None:
        """respawn_max=3: three exits are respawned, the fourth gives up (openrc#247 gave 2)."""
        policy = _policy(max_=3, period=100)
        answers = [policy.on_exit(now=t, ran_for=0.1) for t in (0.0, 1.0, 2.0, 3.0)]
        assert answers == [1.0, 1.0, 1.0, None]

    def test_zero_is_unlimited(self) -> None:
        """respawn_max=0 never gives up."""
        policy = _policy(max_=0)
        assert all(policy.on_exit(now=float(t), ran_for=0.0) == 1.0 for t in range(1000))

    def test_window_counts_from_the_first_exit(self) -> None:
        """An exit more than respawn_period after the window's first exit opens a new window."""
        policy = _policy(max_=2, period=10)
        assert policy.on_exit(now=0, ran_for=0) is not None
        assert policy.on_exit(now=9, ran_for=0) is not None
        # 10.5 s after the first exit: a fresh window, although the last exit was 1.5 s ago.
        assert policy.on_exit(now=10.5, ran_for=0) is not None
        assert policy.on_exit(now=11, ran_for=0) is not None
        assert policy.on_exit(now=12, ran_for=0) is None

    def test_window_does_not_slide(self) -> None:
        """Exits inside the window count even if spread out: the window is fixed, not sliding."""
        policy = _policy(max_=2, period=10)
        assert policy.on_exit(now=0, ran_for=0) is not None
        assert policy.on_exit(now=6, ran_for=0) is not None
        assert policy.on_exit(now=9.9, ran_for=0) is None

    def test_no_period_counts_the_whole_life(self) -> None:
        """respawn_period=None: the limit covers the service's whole life in this supervisor."""
        policy = _policy(max_=2, period=None)
        assert policy.on_exit(now=0, ran_for=0) is not None
        assert policy.on_exit(now=1e6, ran_for=1e6) is not None
        assert policy.on_exit(now=2e6, ran_for=1e6) is None


class TestBackoff:
    def test_delay_doubles_up_to_the_cap(self) -> None:
        """With backoff_max the delay doubles per consecutive exit and stops at the cap."""
        policy = _policy(delay=1.0, backoff=5.0)
        delays = [policy.on_exit(now=float(t), ran_for=0.1) for t in range(5)]
        assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]

    def test_healthy_run_resets_the_backoff(self) -> None:
        """A run of at least healthy_after(delay) seconds brings the delay back to respawn_delay."""
        policy = _policy(delay=1.0, backoff=100.0)
        assert [policy.on_exit(now=float(t), ran_for=0.1) for t in range(3)] == [1.0, 2.0, 4.0]
        assert policy.on_exit(now=100.0, ran_for=healthy_after(1.0)) == 1.0

    def test_without_backoff_the_delay_is_constant(self) -> None:
        """No backoff_max: every respawn waits respawn_delay."""
        policy = _policy(delay=0.5)
        assert {policy.on_exit(now=float(t), ran_for=0) for t in range(10)} == {0.5}

    def test_healthy_after_bounds(self) -> None:
        """healthy_after is 10x the delay, at least 1 s, at most 60 s."""
        assert (healthy_after(0), healthy_after(2), healthy_after(30)) == (1.0, 20.0, 60.0)
