"""The commands a node runs at boot, each beside its peer in the same run.

1. **Start-up of everyday commands** against a bare ``python -c "import click"`` (the floor any
   click program pays): ``noderole plan server``, ``noderole status`` and ``noderole apply
   server`` while both services run and nothing changed (re-apply). All are fresh processes on
   one scratch root staged like :mod:`bench.bench_apply`'s (stand-ins, k3s's CA and kubeconfig,
   both services running under the native supervisor), interleaved with the peer so machine
   noise hits both alike, after one untimed warm-up each.

2. **Boot-path lag**: from the moment k3s has written its server CA and admin kubeconfig to the
   moment ``konnectivity-server`` is exec'd, in a fresh ``noderole apply server`` (nothing
   running, no CA, no kubeconfig, no serving certificate: konnectivity waits for k3s's files,
   then mints, then starts). Both moments are file times on the same file system: the kubeconfig
   k3s's stand-in writes (its last file), and a stamp a two-line ``/bin/sh`` wrapper in front of
   the konnectivity stand-in touches before it ``exec``\\ s it. The peer is the seed's way on the
   same files: its ``sh`` loop polling every 2 s, then the openssl CLI minting, then the same
   wrapper (``sh -c``, no OpenRC around it).

Child processes are run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed from their
environment), as on a node: otherwise every edited module would be compiled again on each run.

    python -m bench.bench_commands [--quick]
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench._common import Row, paired_ratio, summarize
from bench.bench_apply import (
    CERT_DIR,
    DISABLED,
    K3S_TLS,
    KUBECONFIG,
    _end_node,
    _free_port,
    _noderole_argv,
    _stage,
)

__all__ = ["child_environment", "run"]

PEER = 'python -c "import click"'
STAMP = "/run/konnectivity-exec.stamp"
KONNECTIVITY = "/usr/local/bin/konnectivity-server"
WRAPPER = """#!/bin/sh
: > "${NODEROLE_ROOT%/}/run/konnectivity-exec.stamp"
exec "$0.real" "$@"
"""
SEED_LOOP = """
set -e
R="$1"
while [ ! -r "$R/var/lib/rancher/k3s/server/tls/server-ca.crt" ] ||
      [ ! -r "$R/var/lib/rancher/k3s/server/tls/server-ca.key" ] ||
      [ ! -r "$R/etc/rancher/k3s/k3s.yaml" ]; do
    sleep 2
done
D="$R/var/lib/spinifex-eks/konnectivity"
mkdir -p "$D"
openssl ecparam -name prime256v1 -genkey -noout -out "$D/tls.key" 2>/dev/null
openssl req -new -key "$D/tls.key" -subj /CN=konnectivity-server -out "$D/tls.csr" 2>/dev/null
openssl x509 -req -in "$D/tls.csr" -CA "$R/var/lib/rancher/k3s/server/tls/server-ca.crt" \
    -CAkey "$R/var/lib/rancher/k3s/server/tls/server-ca.key" -CAcreateserial -days 365 \
    -out "$D/tls.crt" 2>/dev/null
exec "$R/usr/local/bin/konnectivity-server" --health-port=0
"""
"""The seed's critical path on the same files: poll every 2 s, mint with openssl, exec."""


def child_environment(root: Path | None = None) -> dict[str, str]:
    """The environment of a timed child: bytecode caching on, no inherited NODEROLE_ROOT."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "NODEROLE_ROOT")
    }
    if root is not None:
        env["NODEROLE_ROOT"] = str(root)
    return env


def _timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, timeout=120)
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr!r}")
    return elapsed


def _noderole(root: Path, *args: str) -> list[str]:
    disable = [o for name in DISABLED for o in ("--disable-plugin", name)]
    return [*_noderole_argv(), "--root", str(root), *disable, *args]


@contextlib.contextmanager
def _node(base: Path) -> Iterator[Path]:
    root = base / "node"
    root.mkdir()
    try:
        _stage(root, _free_port())
        real = root / KONNECTIVITY.lstrip("/")
        real.rename(real.with_name(real.name + ".real"))
        real.write_text(WRAPPER)
        real.chmod(0o755)
        yield root
    finally:
        _end_node(root)


# --------------------------------------------------------------------------- start-up rows

COMMANDS = (
    ("plan server (fresh process)", ("plan", "server"), "<= 1.5x"),
    ("status, both running (fresh process)", ("status",), "<= 1.2x"),
    ("re-apply server, nothing changed (fresh process)", ("apply", "server"), "<= 1.5x"),
)


def _until_ready(root: Path, env: dict[str, str], *, timeout: float = 60.0) -> None:
    """Wait until ``status`` exits 0: apply returns once both services run, and konnectivity's
    readiness check passes a moment later (``status`` exits 11, STARTING, meanwhile; on a busy
    machine the first timed ``status`` met it)."""
    deadline = time.monotonic() + timeout
    while True:
        done = subprocess.run(_noderole(root, "status"), env=env, capture_output=True, text=True)
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the node was not ready {timeout:.0f} s after apply (status exit "
                f"{done.returncode}): {done.stdout[-500:]}{done.stderr[-500:]}"
            )
        time.sleep(0.1)


def _startup_rows(root: Path, samples: int) -> list[Row]:
    env = child_environment()
    peer_argv = [sys.executable, "-c", "import click"]
    subprocess.run(_noderole(root, "apply", "server"), check=True, env=env, capture_output=True)
    _until_ready(root, env)
    argvs = [_noderole(root, *args) for _, args, _ in COMMANDS]
    for argv in [peer_argv, *argvs]:  # warm-up: page cache, bytecode, entry-point cache
        _timed(argv, env)
    ours: list[list[float]] = [[] for _ in COMMANDS]
    cpu: list[list[float]] = [[] for _ in COMMANDS]
    peer: list[float] = []
    peer_cpu: list[float] = []
    for _ in range(samples):
        for index, argv in enumerate([peer_argv, *argvs]):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            wall = _timed(argv, env)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            used = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
            if index == 0:
                peer.append(wall)
                peer_cpu.append(used)
            else:
                ours[index - 1].append(wall)
                cpu[index - 1].append(used)
    peer_median, peer_spread, _ = summarize(peer)
    peer_cpu_median, peer_cpu_spread, _ = summarize(peer_cpu)
    rows = []
    for (name, _, target), walls, cpus in zip(COMMANDS, ours, cpu, strict=True):
        median, spread, _ = summarize(walls)
        rows.append(
            Row(
                benchmark=name,
                unit="ms",
                median=median,
                spread=spread,
                samples=samples,
                peer=PEER,
                peer_median=peer_median,
                peer_spread=peer_spread,
                target=target,
                paired=paired_ratio(walls, peer),
            )
        )
        cpu_median, cpu_spread, _ = summarize(cpus)
        rows.append(
            Row(
                benchmark=f"{name}: CPU time",
                unit="ms CPU",
                median=cpu_median,
                spread=cpu_spread,
                samples=samples,
                peer=PEER,
                peer_median=peer_cpu_median,
                peer_spread=peer_cpu_spread,
                target="",
                paired=paired_ratio(cpus, peer_cpu),
            )
        )
    subprocess.run(_noderole(root, "stop"), check=True, env=env, capture_output=True)
    return rows


# --------------------------------------------------------------------------- boot-path lag


def _clean_inputs(root: Path) -> None:
    """Nothing k3s or konnectivity wrote: the next apply is a first boot."""
    for path in (
        root / K3S_TLS.lstrip("/") / "server-ca.crt",
        root / K3S_TLS.lstrip("/") / "server-ca.key",
        root / KUBECONFIG.lstrip("/"),
        root / STAMP.lstrip("/"),
    ):
        path.unlink(missing_ok=True)
    for directory in (root / CERT_DIR.lstrip("/"), root / "var/lib/noderole/certs"):
        shutil.rmtree(directory, ignore_errors=True)


def _lag_ms(root: Path) -> float:
    written = (root / KUBECONFIG.lstrip("/")).stat().st_mtime_ns
    execed = (root / STAMP.lstrip("/")).stat().st_mtime_ns
    return (execed - written) / 1e6


def _wait_for(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear within {timeout:g}s")
        time.sleep(0.01)


def _ours_lag(root: Path) -> float:
    env = child_environment()
    _clean_inputs(root)
    subprocess.run(_noderole(root, "apply", "server"), check=True, env=env, capture_output=True)
    lag = _lag_ms(root)
    subprocess.run(_noderole(root, "stop"), check=True, env=env, capture_output=True)
    return lag


def _peer_lag(root: Path) -> float:
    """The seed's loop against the k3s stand-in writing the same files."""
    _clean_inputs(root)
    env = child_environment(root)
    env["NODEROLE_K3S_STANDIN_DELAY"] = "0.5"
    k3s = subprocess.Popen(
        [str(root / "usr/local/bin/k3s"), "server"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The seed's loop starts with k3s (OpenRC starts it right after): a 2 s tick in flight.
        seed = subprocess.Popen(
            ["sh", "-c", SEED_LOOP, "seed", str(root)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_for(root / STAMP.lstrip("/"))
        seed.kill()
        seed.wait()
    finally:
        k3s.kill()
        k3s.wait()
    return _lag_ms(root)


def _lag_rows(root: Path, samples: int, peer_samples: int) -> list[Row]:
    ours: list[float] = []
    peer: list[float] = []
    _ours_lag(root)  # warm-up
    for index in range(samples):
        ours.append(_ours_lag(root))
        if index < peer_samples:
            peer.append(_peer_lag(root))
    return [
        Row.from_samples(
            "boot-path lag: k3s CA + kubeconfig written -> konnectivity-server exec'd",
            "ms",
            ours,
            peer="seed: sh poll every 2 s + openssl mint",
            peer_samples=peer,
            target="<= 20 ms median",
            p95=True,
        )
    ]


def run(quick: bool) -> list[Row]:
    """Start-up rows (milliseconds, wall and CPU), then the boot-path lag."""
    samples = 3 if quick else 21
    with tempfile.TemporaryDirectory(prefix="bench-commands-") as base, _node(Path(base)) as root:
        rows = _startup_rows(root, samples)
        rows += _lag_rows(root, 3 if quick else 15, 2 if quick else 5)
    return rows


def _print(rows: list[Row]) -> None:
    for row in rows:
        ratio = f" ({row.ratio:.2f}x)" if row.ratio is not None else ""
        print(
            f"{row.benchmark}: {row.median:.1f} {row.unit} vs {row.peer}: "
            f"{row.peer_median or 0:.1f}{ratio}  target {row.target or '-'}"
        )


if __name__ == "__main__":
    _print(run(quick="--quick" in sys.argv[1:]))
