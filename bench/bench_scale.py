"""The native supervisor at scale: apply and stop of 1,000 services, CPU of a crash-looping node.

- **apply**: ``engine.apply_plan`` of a plan of N trivial services (``sleep 1000``, no steps)
  through the native backend, in a scratch root, with no daemon running (the apply starts it),
  under the soft limit of open files a node gives (1,024).
  Timed from the call to its return; every service must be reported started.
- **stop**: the same N services stopped in one ``NativeBackend.stop`` (the daemon sends SIGTERM
  to each group and answers once every process is gone).
- **crash loop**: 200 services whose process exits at once, ``respawn_delay = 0.1``, unlimited
  respawns; the daemon's CPU time (utime + stime from ``/proc/PID/stat``) over a window of wall
  time, as a percentage of one core.

No peer is measured beside these rows (the issue states absolute targets).

    python -m bench.bench_scale [--quick]
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench._common import Row

__all__ = ["run"]

APPLY_TARGET = "<= 5 s (issue 12, 14)"
STOP_TARGET = "<= 2 s (issue 12, 14)"
CPU_TARGET = "<= 50 % of one core (issue 12)"


def _plan(count: int, command: list[str], respawn_delay: float) -> object:
    from noderole.plan import build_plan
    from noderole.records import Service, Supervision

    services = [
        Service(
            name=f"s{i}",
            roles=["scale"],
            command=command,
            supervision=Supervision(respawn_delay=respawn_delay, respawn_max=0),
        )
        for i in range(count)
    ]
    return build_plan(services, "scale")


def _apply(root: Path, count: int, command: list[str], respawn_delay: float) -> float:
    """Apply ``count`` services; seconds taken. Raises if any was not started."""
    from noderole.backends.native import NativeBackend
    from noderole.clock import SystemClock
    from noderole.console import QuietProgress
    from noderole.engine import apply_plan
    from noderole.plan import Plan
    from noderole.root import NodeRoot

    # Commands are node paths: put a copy of the program under the root.
    program = root / command[0].lstrip("/")
    if not program.exists():
        program.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(command[0], program)
    plan = _plan(count, command, respawn_delay)
    assert isinstance(plan, Plan)
    backend = NativeBackend(NodeRoot(root))
    began = time.perf_counter()
    report = apply_plan(
        plan, root=NodeRoot(root), clock=SystemClock(), backend=backend, progress=QuietProgress()
    )
    took = time.perf_counter() - began
    failed = [f"{r.name}: {r.reason}" for r in report.services if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} of {count} services did not start: {failed[:3]}")
    return took


def _stop(root: Path, count: int) -> float:
    from noderole.backends.native import NativeBackend
    from noderole.root import NodeRoot

    backend = NativeBackend(NodeRoot(root))
    began = time.perf_counter()
    statuses = backend.stop([f"s{i}" for i in range(count)])
    took = time.perf_counter() - began
    left = [s.name for s in statuses if s.state != "stopped"]
    if left:
        raise RuntimeError(f"{len(left)} services not stopped: {left[:3]}")
    return took


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _crash_loop_cpu(root: Path, count: int, window: float) -> float:
    """Percent of one core the daemon uses with ``count`` services crash-looping."""
    from noderole.backends.native import NativeBackend
    from noderole.root import NodeRoot

    _apply(root, count, ["/bin/true"], 0.1)
    backend = NativeBackend(NodeRoot(root))
    pid = backend.supervisor.daemon_pid()
    assert pid is not None
    try:
        time.sleep(1.0)  # past the first wave of starts
        cpu0, wall0 = _cpu_seconds(pid), time.monotonic()
        time.sleep(window)
        cpu1, wall1 = _cpu_seconds(pid), time.monotonic()
    finally:
        backend.supervisor.shutdown()
    return 100.0 * (cpu1 - cpu0) / (wall1 - wall0)


@contextlib.contextmanager
def _usual_limit() -> Iterator[None]:
    """The soft limit of open files a node gives ``noderole apply`` (1,024, what init and
    systemd give a program), inherited by the daemon the apply starts; this machine may give
    more, which once hid a daemon running out of descriptors at a few hundred services."""
    import resource

    given = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, given[1]), given[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, given)


def run(quick: bool) -> list[Row]:
    """Apply/stop of N services (N = 1,000; 20 when quick) and the crash-loop CPU, under the
    usual soft limit of open files."""
    with _usual_limit():
        return _run(quick)


def _run(quick: bool) -> list[Row]:
    count = 20 if quick else 1000
    looping = 5 if quick else 200
    rounds = 1 if quick else 3
    applies, stops, cpus = [], [], []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="noderole-scale-") as tmp:
            root = Path(tmp)
            try:
                applies.append(_apply(root, count, ["/bin/sleep", "1000"], 1.0))
                stops.append(_stop(root, count))
            finally:
                _shutdown(root)
        with tempfile.TemporaryDirectory(prefix="noderole-loop-") as tmp:
            cpus.append(_crash_loop_cpu(Path(tmp), looping, 0.5 if quick else 5.0))
    return [
        _row(f"apply of {count} services (native)", "s", applies, APPLY_TARGET),
        _row(f"stop of {count} services (native)", "s", stops, STOP_TARGET),
        _row(f"supervisor CPU, {looping} services crash-looping at 0.1 s", "%", cpus, CPU_TARGET),
    ]


def _shutdown(root: Path) -> None:
    from noderole.backends.native import NativeBackend
    from noderole.root import NodeRoot

    NativeBackend(NodeRoot(root)).supervisor.shutdown()


def _row(name: str, unit: str, samples: list[float], target: str) -> Row:
    ordered = sorted(samples)
    return Row(
        benchmark=name,
        unit=unit,
        median=ordered[len(ordered) // 2],
        spread=ordered[-1] - ordered[0],
        samples=len(samples),
        target=target,
    )


def _main(argv: list[str]) -> int:
    for row in run(quick="--quick" in argv):
        print(
            f"{row.benchmark:56} {row.median:8.2f} {row.unit} (spread {row.spread:.2f}, "
            f"n={row.samples})  target {row.target}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
