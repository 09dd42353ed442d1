"""Debian's prometheus-node-exporter, unpacked (never installed), for the metrics tests.

By hand: ``apt-get download prometheus-node-exporter && dpkg -x *.deb root``; the binary is
``root/usr/bin/prometheus-node-exporter``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.harness.openrc import _cache_dir

__all__ = ["PACKAGE", "node_exporter"]

PACKAGE = "prometheus-node-exporter"


def node_exporter() -> Path:
    """The binary, downloaded and unpacked once per machine (cached; safe under concurrency).

    Raises ``RuntimeError`` with apt's output when the package cannot be had.
    """
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / "node-exporter"
    binary = target / "usr" / "bin" / PACKAGE
    with open(cache / ".node-exporter.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            os.chmod(tmp, 0o777)  # apt's sandbox user must write here
            done = subprocess.run(
                ["apt-get", "download", PACKAGE], cwd=tmp, capture_output=True, text=True
            )
            debs = sorted(Path(tmp).glob("*.deb"))
            if done.returncode != 0 or not debs:
                raise RuntimeError(
                    f"could not download {PACKAGE} (apt-get download {PACKAGE}): "
                    f"{done.stderr.strip()}"
                )
            unpacked = Path(tmp) / "root"
            subprocess.run(["dpkg", "-x", str(debs[0]), str(unpacked)], check=True)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(unpacked, target)
        return binary
