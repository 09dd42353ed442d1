"""Debian's logrotate, unpacked (never installed), for the tests of the configuration noderole
writes.

By hand::

    apt-get download logrotate libpopt0
    for f in *.deb; do dpkg -x "$f" root; done
    LD_LIBRARY_PATH=root/usr/lib/x86_64-linux-gnu root/usr/sbin/logrotate -s STATE -f CONFIG

``-s`` keeps its state file away from ``/var/lib/logrotate``; ``-f`` rotates whatever the
interval says. Only the named CONFIG is read (no ``/etc/logrotate.conf``): logrotate's own
defaults apply, ``rotate 0`` among them (old copies are removed), so a test sets ``rotate``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.harness.openrc import unpacked

__all__ = ["PACKAGES", "Logrotate", "logrotate"]

PACKAGES = ("logrotate", "libpopt0")
"""logrotate, and libpopt0: the one library it needs that a minimal Debian lacks."""


class Logrotate:
    """One unpacked copy of Debian's logrotate."""

    def __init__(self, root: Path) -> None:
        self.root = root
        """The ``dpkg -x`` directory."""

    @property
    def binary(self) -> Path:
        return self.root / "usr" / "sbin" / "logrotate"

    def run(
        self, config: Path, state: Path, *extra: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``logrotate -s STATE [EXTRA...] CONFIG``; with ``check``, a failure fails the test
        with its output."""
        done = self.call([str(self.binary), "-s", str(state), *extra, str(config)])
        if check:
            assert done.returncode == 0, f"logrotate failed: {done.stdout}{done.stderr}"
        return done

    def call(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = str(self.root / "usr" / "lib" / "x86_64-linux-gnu")
        return subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=60)


def logrotate() -> Logrotate:
    """Download and unpack logrotate once per machine (cached; safe under concurrent callers).

    Raises ``RuntimeError`` with apt's output when the packages cannot be had.
    """
    return Logrotate(unpacked("logrotate", PACKAGES, "usr/sbin/logrotate"))
