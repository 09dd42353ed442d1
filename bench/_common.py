"""Shared shape of a benchmark row, and the statistics every benchmark prints.

Each ``bench/bench_*.py`` module exposes ``run(quick: bool) -> list[Row]``; ``bench/run.py`` runs
them all, prints one table and writes ``bench/results.json``. ``quick`` uses tiny sizes so the test
suite can smoke-run every benchmark without timing anything.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import attrs

__all__ = ["Row", "paired_ratio", "summarize"]


@attrs.frozen(kw_only=True)
class Row:
    """One measured figure, side by side with its peer when there is one."""

    benchmark: str
    """What is measured, e.g. ``wait reaction latency``."""
    unit: str
    """Unit of ``median`` and ``spread`` (``ms``, ``s``, ``MB``, ``x``)."""
    median: float
    """noderole's median."""
    spread: float
    """p95 - p5 (or max - min for few samples) of noderole's samples."""
    samples: int
    """How many samples."""
    peer: str | None = None
    """The peer measured in the same run, if any."""
    peer_median: float | None = None
    """The peer's median."""
    peer_spread: float | None = None
    """The peer's spread."""
    target: str = ""
    """The target stated in the issue, e.g. ``<= 20 ms p95``."""
    p95: float | None = None
    """noderole's 95th percentile, where the target is a p95."""
    paired: float | None = None
    """Where each round timed noderole and its peer back to back: the median of the rounds' own
    ratios (see :func:`paired_ratio`)."""

    @classmethod
    def from_samples(
        cls,
        benchmark: str,
        unit: str,
        ours: Sequence[float],
        *,
        peer: str | None = None,
        peer_samples: Sequence[float] | None = None,
        target: str = "",
        p95: bool = False,
    ) -> Row:
        """The row of ``ours`` beside ``peer``'s samples (summarized alike), with noderole's
        95th percentile when ``p95``."""
        median, spread, high = summarize(ours)
        peer_median = peer_spread = None
        if peer_samples:
            peer_median, peer_spread, _ = summarize(peer_samples)
        return cls(
            benchmark=benchmark,
            unit=unit,
            median=median,
            spread=spread,
            samples=len(ours),
            peer=peer,
            peer_median=peer_median,
            peer_spread=peer_spread,
            target=target,
            p95=high if p95 else None,
        )

    @property
    def ratio(self) -> float | None:
        """noderole / peer (lower is better for times and memory)."""
        if self.peer_median in (None, 0):
            return None
        assert self.peer_median is not None
        return self.median / self.peer_median


def summarize(samples: Sequence[float]) -> tuple[float, float, float]:
    """(median, spread, p95) of samples; spread is p95 - p5, or max - min below 20 samples."""
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("no samples")
    median = statistics.median(ordered)
    if len(ordered) >= 20:
        q = statistics.quantiles(ordered, n=20, method="inclusive")
        p5, p95 = q[0], q[-1]
    else:
        p5, p95 = ordered[0], ordered[-1]
    return median, p95 - p5, p95


def paired_ratio(ours: Sequence[float], peer: Sequence[float]) -> float:
    """The median of ``ours[i] / peer[i]``, each pair timed back to back in one round.

    The ratio of the two medians mixes samples taken minutes apart: on a shared machine whose
    speed drifts during the run, the two medians can come from differently loaded stretches. A
    pair shares its stretch, so its ratio cancels the drift; the median of the pairs' ratios
    shrugs off a pair caught by a spike.
    """
    if len(ours) != len(peer) or not ours:
        raise ValueError(f"paired samples differ in number: {len(ours)} and {len(peer)}")
    return statistics.median(mine / theirs for mine, theirs in zip(ours, peer, strict=True))
