"""Running one service's pre-start steps in isolation, and getting what they did as data."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from noderole import recordclass
from noderole.clock import Clock, FakeClock
from noderole.errors import StepError
from noderole.records import (
    WAIT_TYPES,
    Service,
    Step,
    Wait,
    WaitForCommand,
    WaitForHttp,
    WaitForPaths,
    WaitForSocket,
    WaitForTcp,
)
from noderole.stepcontext import StepContext
from noderole.steps import StepResult, run_steps
from noderole.testing._root import RootLike, as_node_root

if TYPE_CHECKING:
    from noderole.certstamp import CertOutcome

__all__ = ["PrestartOutcome", "new_fake_clock", "run_prestart", "wait_targets"]


def new_fake_clock() -> FakeClock:
    """A :class:`FakeClock` whose wall time starts at the real time.

    Sleeping advances it instantly. Its wall clock starts now, not at a fixed date, so a CA made
    by :func:`~noderole.testing.make_cluster_ca` (valid from the real now) is valid on it.
    """
    return FakeClock(wall=time.time())


@recordclass.define(kw_only=True)
class PrestartOutcome:
    """What running a service's pre-start steps did."""

    service: str
    """The service whose steps ran."""
    error: StepError | None
    """The failure (``str(error)`` is the reason ``apply`` shows), or None when all succeeded."""
    failed_step: Step | None
    """The step that failed, or None."""
    results: list[StepResult]
    """One result per step that completed, in order (the failed step has none)."""
    waited: list[str]
    """What the waits waited for, in order, including a wait that timed out: node paths,
    ``host:port``, URLs, commands."""
    written: list[str]
    """Node paths the steps wrote (files and minted certificates and keys), in order."""
    certificates: list[CertOutcome]
    """Every certificate step's outcome, minted or reused."""
    progress: list[str]
    """What the steps reported while blocked (``waiting for /x (up to 120s)``)."""
    seconds: float
    """Time the steps took on the clock (fake seconds with a fake clock)."""

    @property
    def ok(self) -> bool:
        """True when every step succeeded."""
        return self.error is None

    @property
    def reason(self) -> str:
        """The failure reason, or an empty string."""
        return "" if self.error is None else str(self.error)

    @property
    def minted(self) -> list[CertOutcome]:
        """Certificates minted this time (reused ones left out)."""
        return [c for c in self.certificates if c.action == "minted"]


def wait_targets(wait: Wait) -> list[str]:
    """What a wait record waits for, as strings: node paths, ``host:port``, a URL or a command."""
    if isinstance(wait, WaitForPaths):
        return list(wait.paths)
    if isinstance(wait, WaitForSocket):
        return [wait.path]
    if isinstance(wait, WaitForTcp):
        return [f"{wait.host}:{wait.port}"]
    if isinstance(wait, WaitForHttp):
        return [wait.url]
    if isinstance(wait, WaitForCommand):
        return [" ".join(wait.argv)]
    raise TypeError(f"not a wait record: {wait!r}")


def run_prestart(
    service: Service, node_root: RootLike, *, clock: Clock | None = None
) -> PrestartOutcome:
    """Run ``service.pre_start`` against ``node_root`` exactly as ``apply`` would, and report.

    A failing step is reported in the outcome (``ok`` False), never raised. An exception that is
    not a :class:`~noderole.errors.StepError` (a bug in a plugin's ``Call`` function) propagates,
    so the test shows its traceback. Without ``clock``, a fresh fake clock is used: a 120 s wait
    for a file that never comes fails at once.
    """
    root = as_node_root(node_root)
    used = clock if clock is not None else new_fake_clock()
    progress: list[str] = []
    ctx = StepContext(service=service.name, root=root, clock=used, progress=progress.append)
    start = used.monotonic()
    error: StepError | None = None
    try:
        results = run_steps(service.pre_start, ctx)
    except StepError as exc:
        error = exc
        results = list(getattr(exc, "results", []))
    failed_step = service.pre_start[len(results)] if error is not None else None
    ran = [r.step for r in results] + ([failed_step] if failed_step is not None else [])
    waited = [t for step in ran if isinstance(step, WAIT_TYPES) for t in wait_targets(step)]
    return PrestartOutcome(
        service=service.name,
        error=error,
        failed_step=failed_step,
        results=results,
        waited=waited,
        written=list(ctx.written),
        certificates=[r.certificate for r in results if r.certificate is not None],
        progress=progress,
        seconds=used.monotonic() - start,
    )
