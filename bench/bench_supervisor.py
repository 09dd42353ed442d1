"""Native supervisor vs OpenRC's supervise-daemon vs supervisord: respawn latency and memory.

Respawn latency: a child writes its pid into a fifo as it starts (``echo $$ > FIFO; exec sleep``);
the benchmark SIGKILLs it and times until the next pid arrives, i.e. until a new child runs. All
three respawn with no delay (supervise-daemon refuses ``--respawn-delay 0``: the option is left
out). Memory: the supervisors' RSS and PSS (``/proc/PID/smaps_rollup``; PSS splits each shared
page among the processes that map it, so the sum is what they cost the node) with 2, 20 and
200 services, children excluded: one noderole daemon and its watchdog (a fork of the daemon), one
supervise-daemon per service, one supervisord.

supervise-daemon needs ``/run/openrc``: its part runs in a private mount namespace (``unshare -m``)
with a tmpfs on /run, in a child of this script (``--openrc-inside``) that prints JSON.

    python -m bench.bench_supervisor [--quick]
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench._common import Row, summarize

__all__ = ["run"]

_REPO = Path(__file__).resolve().parent.parent
LATENCY = "respawn latency (SIGKILL -> new child runs)"
LATENCY_TARGET = "<= 3 ms median"
RSS_TARGET = "<= 25 MB total at 20 services"
PSS_TARGET = "<= 12 MB at 2 services, <= 15 MB at 200 (issue 14)"
Memory = dict[int, tuple[float, float]]
"""services -> (RSS, PSS) in MB, summed over the supervisor's processes."""


# --------------------------------------------------------------------------- shared helpers


class PidFifo:
    """A fifo children write their pid into; read with a timeout."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "pids.fifo"
        os.mkfifo(self.path)
        # O_RDWR: never blocks, and never sees EOF between two writers.
        self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        self.buffer = b""

    def script(self) -> str:
        return f"echo $$ > {self.path}; exec sleep 1000"

    def next_pid(self, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError(f"no child reported its start within {timeout:g}s")
            self.buffer += os.read(self.fd, 4096)
        line, self.buffer = self.buffer.split(b"\n", 1)
        return int(line)

    def close(self) -> None:
        os.close(self.fd)


def _respawn_samples(fifo: PidFifo, kills: int) -> list[float]:
    """Kill the reporting child ``kills`` times; milliseconds until each successor reports."""
    pid = fifo.next_pid()
    samples = []
    for _ in range(kills):
        time.sleep(0.01)  # let the child settle into ``sleep``: time a respawn, not an exec race
        t0 = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        pid = fifo.next_pid()
        samples.append((time.perf_counter() - t0) * 1000.0)
    return samples


def _memory_mb(pids: list[int]) -> tuple[float, float]:
    """(RSS, PSS) of ``pids`` summed, in MB."""
    rss_kb = pss_kb = 0
    for pid in pids:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key == "Rss":
                    rss_kb += int(value.split()[0])
                elif key == "Pss":
                    pss_kb += int(value.split()[0])
    return rss_kb / 1024.0, pss_kb / 1024.0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- noderole


def _watchdogs(daemon: int) -> list[int]:
    """The daemon's watchdog process(es), among its children."""
    from noderole.testing._processes import WATCHDOG_MARK, process_cmdline

    return [p for p in _children(daemon) if WATCHDOG_MARK in process_cmdline(p)]


@contextlib.contextmanager
def _noderole(directory: Path, services: int, script: str) -> Iterator[int]:
    """A noderole supervisor running ``services`` services; yields the daemon's pid."""
    from noderole.supervisor import ProcessSpec, SupervisionSpec, Supervisor

    supervisor = Supervisor(directory / "run")
    try:
        for i in range(services):
            supervisor.start(
                ProcessSpec(
                    name=f"s{i}",
                    argv=("/bin/sh", "-c", script if i == 0 else "exec sleep 1000"),
                    environment={"PATH": "/usr/bin:/bin"},
                    supervision=SupervisionSpec(respawn_delay=0, respawn_max=0),
                    fingerprint="bench",
                )
            )
        pid = supervisor.daemon_pid()
        assert pid is not None
        yield pid
    finally:
        supervisor.shutdown()


def _noderole_figures(kills: int, sizes: list[int]) -> tuple[list[float], Memory]:
    with tempfile.TemporaryDirectory(prefix="bench-sup-") as tmp:
        fifo = PidFifo(Path(tmp))
        try:
            with _noderole(Path(tmp) / "lat", 1, fifo.script()):
                latency = _respawn_samples(fifo, kills)
        finally:
            fifo.close()
        rss = {}
        for n in sizes:
            with _noderole(Path(tmp) / f"rss{n}", n, "exec sleep 1000") as pid:
                # The daemon and its watchdog: both are the supervisor's cost.
                watchdogs = _watchdogs(pid)
                rss[n] = _memory_mb([pid, *watchdogs])
                daemon_rss, daemon_pss = _memory_mb([pid])
                watchdog_rss, watchdog_pss = _memory_mb(watchdogs)
                print(
                    f"noderole at {n} services: daemon RSS {daemon_rss:.1f} MB PSS "
                    f"{daemon_pss:.1f} MB; watchdog RSS {watchdog_rss:.1f} MB PSS "
                    f"{watchdog_pss:.1f} MB"
                )
    return latency, rss


# --------------------------------------------------------------------------- supervise-daemon


def _openrc_inside(kills: int, sizes: list[int]) -> dict[str, Any]:
    """Run in the private namespace: measure supervise-daemon and return the figures."""
    from tests.harness.openrc import openrc

    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run"], check=True)
    os.makedirs("/run/openrc", exist_ok=True)
    rc = openrc()
    started: list[int] = []

    def start(name: str, script: str) -> int:
        pidfile = f"/run/{name}.pid"
        subprocess.run(
            [
                str(rc.supervise_daemon),
                name,
                "--start",
                "--pidfile",
                pidfile,
                "--respawn-max",
                "0",
                "/bin/sh",
                "--",
                "-c",
                script,
            ],
            env=rc.environment(name),
            check=True,
            capture_output=True,
        )
        deadline = time.monotonic() + 10
        while not os.path.exists(pidfile) or not Path(pidfile).read_text().strip():
            if time.monotonic() > deadline:
                raise TimeoutError(f"supervise-daemon wrote no {pidfile}")
            time.sleep(0.005)
        pid = int(Path(pidfile).read_text().split()[0])  # the supervisor's pid (openrc#163)
        started.append(pid)
        return pid

    def stop_all() -> None:
        for pid in started:
            kids = _children(pid)
            _kill([pid])
            _kill(kids)
        started.clear()

    with tempfile.TemporaryDirectory(prefix="bench-sd-") as tmp:
        fifo = PidFifo(Path(tmp))
        try:
            start("lat", fifo.script())
            latency = _respawn_samples(fifo, kills)
        finally:
            stop_all()
            fifo.close()
    rss = {}
    for n in sizes:
        try:
            pids = [start(f"rss{n}-{i}", "exec sleep 1000") for i in range(n)]
            time.sleep(0.05)
            rss[n] = _memory_mb(pids)
        finally:
            stop_all()
    return {"latency": latency, "rss": rss}


def _openrc_figures(kills: int, sizes: list[int]) -> tuple[list[float], Memory] | str:
    """supervise-daemon's figures, or why they could not be had."""
    if os.geteuid() != 0:
        return "needs root (mount namespace, tmpfs on /run)"
    try:
        from tests.harness.openrc import openrc, unshare_problem
    except ImportError as e:
        return f"tests/harness/openrc.py not importable: {e}"
    problem = unshare_problem()
    if problem:
        return problem
    try:
        openrc()
    except RuntimeError as e:
        return str(e)
    args = [json.dumps(kills), json.dumps(sizes)]
    done = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            sys.executable,
            "-m",
            "bench.bench_supervisor",
            "--openrc-inside",
            *args,
        ],
        cwd=_REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        return f"the namespace run failed: {done.stderr.strip()[-500:]}"
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return data["latency"], {int(k): (v[0], v[1]) for k, v in data["rss"].items()}


# --------------------------------------------------------------------------- supervisord


@contextlib.contextmanager
def _supervisord(directory: Path, services: int, script: str) -> Iterator[int]:
    binary = Path(sys.executable).parent / "supervisord"
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / "supervisord.conf"
    programs = "".join(
        f"[program:s{i}]\ncommand=/bin/sh -c '{script if i == 0 else 'exec sleep 1000'}'\n"
        "autorestart=true\nstartsecs=0\nstartretries=1000000\n"
        "stopasgroup=true\nkillasgroup=true\n\n"
        for i in range(services)
    )
    conf.write_text(
        f"[supervisord]\nnodaemon=true\nlogfile={directory}/supervisord.log\n"
        # Its programs' AUTO logs go here, not to /tmp, where every run left four files.
        f"childlogdir={directory}\n"
        f"pidfile={directory}/supervisord.pid\n\n{programs}"
    )
    proc = subprocess.Popen(
        [str(binary), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while len(_children(proc.pid)) < services:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("supervisord did not start its programs")
            time.sleep(0.01)
        yield proc.pid
    finally:
        kids = _children(proc.pid)
        proc.kill()
        proc.wait()
        _kill(kids)


def _supervisord_figures(kills: int, sizes: list[int]) -> tuple[list[float], Memory] | str:
    if not (Path(sys.executable).parent / "supervisord").exists():
        return "supervisord is not installed in this venv (pip install supervisor)"
    with tempfile.TemporaryDirectory(prefix="bench-sd-") as tmp:
        fifo = PidFifo(Path(tmp))
        try:
            with _supervisord(Path(tmp) / "lat", 1, fifo.script()):
                latency = _respawn_samples(fifo, kills)
        finally:
            fifo.close()
        rss = {}
        for n in sizes:
            with _supervisord(Path(tmp) / f"rss{n}", n, "exec sleep 1000") as pid:
                rss[n] = _memory_mb([pid])
    return latency, rss


# --------------------------------------------------------------------------- rows


def _rows(
    mine: tuple[list[float], Memory],
    peer: str,
    theirs: tuple[list[float], Memory] | str,
) -> list[Row]:
    latency, rss = mine
    median, spread, p95 = summarize(latency)
    if isinstance(theirs, str):
        print(f"skipped {peer}: {theirs}")
        peer_lat: list[float] = []
        peer_rss: Memory = {}
    else:
        peer_lat, peer_rss = theirs
    pm, ps = summarize(peer_lat)[:2] if peer_lat else (None, None)
    has = bool(peer_lat)
    rows = [
        Row(
            benchmark=LATENCY,
            unit="ms",
            median=median,
            spread=spread,
            samples=len(latency),
            p95=p95,
            peer=peer if has else None,
            peer_median=pm,
            peer_spread=ps,
            target=LATENCY_TARGET,
        )
    ]
    for n, value in rss.items():
        for i, (what, target) in enumerate((("RSS", RSS_TARGET), ("PSS", PSS_TARGET))):
            theirs_n = peer_rss.get(n)
            rows.append(
                Row(
                    benchmark=f"supervisor {what}, {n} services (daemon + watchdog)",
                    unit="MB",
                    median=value[i],
                    spread=0.0,
                    samples=1,
                    peer=peer if theirs_n else None,
                    peer_median=theirs_n[i] if theirs_n else None,
                    peer_spread=0.0 if theirs_n else None,
                    target=target,
                )
            )
    return rows


def run(quick: bool) -> list[Row]:
    """Measure noderole's supervisor, then supervise-daemon and supervisord, in one run."""
    kills = 5 if quick else 200
    slow_kills = 1 if quick else 10  # supervisord takes about 1 s per respawn
    sizes = [2] if quick else [2, 20, 200]
    mine = _noderole_figures(kills, sizes)
    rows = _rows(mine, "supervise-daemon (OpenRC 0.45)", _openrc_figures(kills, sizes))
    rows += _rows(mine, "supervisord 4.3", _supervisord_figures(slow_kills, sizes))
    return rows


def _print(rows: list[Row]) -> None:
    for row in rows:
        peer = (
            f"  vs {row.peer}: {row.peer_median:.2f} (spread {row.peer_spread:.2f})"
            if row.peer and row.peer_median is not None
            else ""
        )
        print(
            f"{row.benchmark:48} noderole {row.median:8.2f} {row.unit} "
            f"(spread {row.spread:.2f}, n={row.samples}){peer}  target {row.target}"
        )


def _main(argv: list[str]) -> int:
    if argv[:1] == ["--openrc-inside"]:
        print(json.dumps(_openrc_inside(json.loads(argv[1]), json.loads(argv[2]))))
        return 0
    _print(run(quick="--quick" in argv))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
