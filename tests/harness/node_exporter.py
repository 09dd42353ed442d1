"""Debian's prometheus-node-exporter and promtool, unpacked (never installed), for the metrics
tests.

By hand: ``apt-get download prometheus-node-exporter && dpkg -x *.deb root``; the binary is
``root/usr/bin/prometheus-node-exporter`` (``prometheus``'s package holds ``usr/bin/promtool``).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.harness.openrc import _cache_dir

__all__ = ["PACKAGE", "node_exporter", "promtool"]

PACKAGE = "prometheus-node-exporter"


def node_exporter() -> Path:
    """The node_exporter binary (:func:`debian_binary`)."""
    return debian_binary(PACKAGE, f"usr/bin/{PACKAGE}")


def promtool() -> Path:
    """Prometheus' promtool, from Debian's ``prometheus`` package (:func:`debian_binary`)."""
    return debian_binary("prometheus", "usr/bin/promtool")


def debian_binary(package: str, path: str) -> Path:
    """``path`` of ``package``, downloaded and unpacked once per machine (cached; safe under
    concurrency).

    Raises ``RuntimeError`` with apt's output when the package cannot be had.
    """
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / ("node-exporter" if package == PACKAGE else package)
    binary = target / path
    with open(cache / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            os.chmod(tmp, 0o777)  # apt's sandbox user must write here
            done = subprocess.run(
                ["apt-get", "download", package], cwd=tmp, capture_output=True, text=True
            )
            debs = sorted(Path(tmp).glob("*.deb"))
            if done.returncode != 0 or not debs:
                raise RuntimeError(
                    f"could not download {package} (apt-get download {package}): "
                    f"{done.stderr.strip()}"
                )
            unpacked = Path(tmp) / "root"
            subprocess.run(["dpkg", "-x", str(debs[0]), str(unpacked)], check=True)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(unpacked, target)
        return binary
