"""Bounded waits: how fast they react and what they cost, next to the seed's ``sleep 2`` shell loop.

Measured in one run:

- reaction latency, file created -> ``run_wait`` returns (inotify), against
  ``while [ ! -r F ]; do sleep 2; done`` in /bin/sh, timed from the creation to the shell's exit;
- reaction latency of a TCP wait, ``listen()`` -> return (polled every 15 ms);
- CPU (user + sys) spent waiting, per 10 s of waiting: a path that never appears (peer: the shell
  loop, its ``sleep`` children included), a closed TCP port, a command that keeps failing;
- wall time of 20 waits in 20 threads, each for its own file, all created by a timer after 1 s.

The shell samples run in background threads while noderole is measured, so the whole benchmark
takes about as long as its slowest part. Run alone: ``python -m bench.bench_waits [--quick]``.
"""

from __future__ import annotations

import contextlib
import os
import random
import resource
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench._common import Row, summarize
from noderole.clock import SystemClock
from noderole.errors import WaitTimeout
from noderole.records import Wait, WaitForCommand, WaitForPaths, WaitForTcp
from noderole.root import NodeRoot
from noderole.waits import run_wait

__all__ = ["run"]

PER = 10.0
"""CPU figures are given per this many seconds of waiting."""


def run(quick: bool) -> list[Row]:
    """Measure; ``quick`` uses few samples and short waits (a smoke run of a few seconds)."""
    with tempfile.TemporaryDirectory(prefix="bench-waits-") as scratch:
        base = Path(scratch)
        shell: dict[str, list[float]] = {}
        (base / "sh").mkdir()
        peers = [
            threading.Thread(target=_shell_latency, args=(base / "sh", quick, shell)),
            threading.Thread(target=_shell_cpu, args=(base / "sh", quick, shell)),
        ]
        for peer in peers:
            peer.start()
        try:
            path_ms = _path_reaction(base / "paths", 10 if quick else 50)
            tcp_ms = _tcp_reaction(5 if quick else 30)
            idle = 0.5 if quick else 10.0
            path_cpu = _wait_cpu(WaitForPaths(paths=["/never/there"], timeout=idle), base)
            with socket.socket() as closed:
                closed.bind(("127.0.0.1", 0))
                port = closed.getsockname()[1]
                tcp_cpu = _wait_cpu(WaitForTcp(host="127.0.0.1", port=port, timeout=idle), base)
            parallel = [
                _parallel(base / f"par{i}", 0.2 if quick else 1.0) for i in range(1 if quick else 3)
            ]
        finally:
            for peer in peers:
                peer.join()
        # After the shell peer: its reaped children would otherwise count in RUSAGE_CHILDREN.
        command_cpu = _wait_cpu(
            WaitForCommand(argv=["/bin/false"], timeout=0.3 if quick else 2.0), base, children=True
        )
    rows = [
        _latency_row("path wait reaction (file created -> return)", path_ms, shell["latency"]),
        _latency_row("tcp wait reaction (listen -> return)", tcp_ms, None),
        _cpu_row("CPU of a path wait that never ends", path_cpu, shell["cpu"]),
        _cpu_row("CPU of a tcp wait on a closed port", tcp_cpu, None),
        _cpu_row("CPU of a command wait (/bin/false, every 100 ms)", command_cpu, None),
    ]
    wall, spread, _ = summarize(parallel)
    target_s = 0.2 if quick else 1.0
    rows.append(
        Row(
            benchmark=f"20 parallel waits, files created after {target_s:g} s: wall time",
            unit="s",
            median=wall,
            spread=spread,
            samples=len(parallel),
            target=f"<= {target_s * 1.3:.2g} s",
        )
    )
    return rows


# --------------------------------------------------------------------------- noderole


def _blocked_wait(
    wait: Wait, root: NodeRoot
) -> tuple[threading.Thread, threading.Event, list[float]]:
    """Start ``wait`` in a thread; the event is set once it blocks; the list gets its end time."""
    blocked = threading.Event()
    ended: list[float] = []

    def body() -> None:
        run_wait(wait, root=root, clock=SystemClock(), progress=lambda _: blocked.set())
        ended.append(time.perf_counter())

    thread = threading.Thread(target=body)
    thread.start()
    return thread, blocked, ended


def _path_reaction(base: Path, samples: int) -> list[float]:
    root = NodeRoot(base)
    (base / "etc").mkdir(parents=True)
    latencies = []
    for i in range(samples):
        thread, blocked, ended = _blocked_wait(WaitForPaths(paths=[f"/etc/f{i}"], timeout=30), root)
        blocked.wait(30)
        time.sleep(random.uniform(0.002, 0.01))  # let it settle into poll()
        start = time.perf_counter()
        (base / f"etc/f{i}").write_text("x")
        thread.join()
        latencies.append((ended[0] - start) * 1000)
    return latencies


def _tcp_reaction(samples: int) -> list[float]:
    root = NodeRoot("/")
    latencies = []
    for _ in range(samples):
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            port = server.getsockname()[1]
            wait = WaitForTcp(host="127.0.0.1", port=port, timeout=30)
            thread, blocked, ended = _blocked_wait(wait, root)
            blocked.wait(30)
            # Past the 5 ms first retry, so the figure is the steady 15 ms schedule.
            time.sleep(random.uniform(0.03, 0.06))
            start = time.perf_counter()
            server.listen()
            thread.join()
            latencies.append((ended[0] - start) * 1000)
    return latencies


def _wait_cpu(wait: Wait, base: Path, *, children: bool = False) -> float:
    """CPU seconds per ``PER`` s of a wait that times out (its thread, plus children if asked)."""
    result: list[float] = []

    def body() -> None:
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = time.thread_time()
        start = time.perf_counter()
        with contextlib.suppress(WaitTimeout):
            run_wait(wait, root=NodeRoot(base), clock=SystemClock())
        used = time.thread_time() - cpu
        if children:
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            used += after.ru_utime - kids.ru_utime + after.ru_stime - kids.ru_stime
        result.append(used * PER / (time.perf_counter() - start))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return result[0]


def _parallel(base: Path, after: float) -> float:
    root = NodeRoot(base)
    (base / "run").mkdir(parents=True)
    start = time.perf_counter()
    threads = [
        threading.Thread(
            target=run_wait,
            args=(WaitForPaths(paths=[f"/run/w{i}/ready"], timeout=30),),
            kwargs={"root": root, "clock": SystemClock()},
        )
        for i in range(20)
    ]
    for thread in threads:
        thread.start()

    def create_all() -> None:
        for i in range(20):
            (base / f"run/w{i}").mkdir()
            (base / f"run/w{i}/ready").write_text("x")

    timer = threading.Timer(after, create_all)
    timer.start()
    for thread in threads:
        thread.join()
    timer.join()
    return time.perf_counter() - start


# --------------------------------------------------------------------------- the seed's shell loop


def _spawn(script: str) -> int:
    return os.posix_spawn("/bin/sh", ["sh", "-c", script], dict(os.environ))


def _shell_latency(base: Path, quick: bool, out: dict[str, list[float]]) -> None:
    latencies = []
    for i in range(1 if quick else 5):
        target = base / f"f{i}"
        pid = _spawn(f"while [ ! -r '{target}' ]; do sleep 2; done")
        # Created at a random point of the loop's 2 s sleep, as a real boot would.
        time.sleep(random.uniform(0.05, 0.1) if quick else random.uniform(0.2, 2.2))
        start = time.perf_counter()
        target.write_text("x")
        os.waitpid(pid, 0)
        latencies.append((time.perf_counter() - start) * 1000)
    out["latency"] = latencies


def _shell_cpu(base: Path, quick: bool, out: dict[str, list[float]]) -> None:
    # The seed's loop, for a file that never appears; wait4 reports the shell and its sleeps.
    limit = 2 if quick else int(PER)
    never = base / "never"
    script = (
        f"i=0; while [ $i -lt {limit} ]; do [ -r '{never}' ] && break; i=$((i + 2)); sleep 2; done"
    )
    start = time.perf_counter()
    _, _, usage = os.wait4(_spawn(script), 0)
    elapsed = time.perf_counter() - start
    out["cpu"] = [(usage.ru_utime + usage.ru_stime) * PER / elapsed]


# --------------------------------------------------------------------------- rows


def _latency_row(name: str, samples: list[float], peer: list[float] | None) -> Row:
    return Row.from_samples(
        name,
        "ms",
        samples,
        peer="sh loop, sleep 2 (seed)" if peer else None,
        peer_samples=peer,
        target="<= 20 ms p95",
        p95=True,
    )


def _cpu_row(name: str, cpu: float, peer: list[float] | None) -> Row:
    return Row(
        benchmark=name,
        unit=f"ms CPU per {PER:g} s",
        median=cpu * 1000,
        spread=0.0,
        samples=1,
        peer="sh loop, sleep 2 (seed)" if peer else None,
        peer_median=peer[0] * 1000 if peer else None,
        peer_spread=0.0 if peer else None,
    )


def _print(rows: list[Row], write: Callable[[str], object] = sys.stdout.write) -> None:
    for row in rows:
        line = f"{row.benchmark}: {row.median:.3g} {row.unit}"
        if row.p95 is not None:
            line += f" (p95 {row.p95:.3g}, n={row.samples})"
        elif row.samples > 1:
            line += f" (spread {row.spread:.2g}, n={row.samples})"
        if row.peer is not None and row.peer_median is not None:
            line += f"; {row.peer}: {row.peer_median:.3g} {row.unit}"
        if row.target:
            line += f"; target {row.target}"
        write(line + "\n")


if __name__ == "__main__":
    _print(run(quick="--quick" in sys.argv[1:]))
