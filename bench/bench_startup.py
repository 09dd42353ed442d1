"""``noderole --help`` wall time against bare ``python -c "import click"``, in the same run.

Both are started as fresh processes, interleaved so machine noise hits both alike, with bytecode
caching on (as on a node; ``PYTHONDONTWRITEBYTECODE`` is removed from their environment). Target:
the ratio of medians <= 1.1x (start-up matters at boot).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from bench._common import Row

__all__ = ["run"]


def _once(argv: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - start


def run(quick: bool) -> list[Row]:
    """Median and spread of both commands, in milliseconds."""
    samples = 3 if quick else 40
    script = shutil.which("noderole")
    ours_argv = [script, "--help"] if script else [sys.executable, "-m", "noderole", "--help"]
    peer_argv = [sys.executable, "-c", "import click"]
    _once(ours_argv), _once(peer_argv)  # warm the page cache for both
    ours, peer = [], []
    for _ in range(samples):
        ours.append(_once(ours_argv) * 1000)
        peer.append(_once(peer_argv) * 1000)
    return [
        Row.from_samples(
            "noderole --help (fresh process)",
            "ms",
            ours,
            peer='python -c "import click"',
            peer_samples=peer,
            target="<= 1.1x",
        )
    ]


if __name__ == "__main__":
    for row in run("--quick" in sys.argv[1:]):
        print(
            f"{row.benchmark}: {row.median:.1f} ms vs {row.peer_median:.1f} ms ({row.ratio:.2f}x)"
        )
