"""Debian's OpenRC, unpacked (never installed) for tests and benchmarks.

How to rerun by hand what the tests do::

    mkdir -p /tmp/orc && cd /tmp/orc
    apt-get download openrc librc1 libeinfo1
    for f in *.deb; do dpkg -x "$f" root; done
    unshare -m --propagation private sh -c '
        mount -t tmpfs tmpfs /run && mkdir -p /run/openrc &&
        LD_LIBRARY_PATH=/tmp/orc/root/lib/x86_64-linux-gnu RC_SVCNAME=demo \\
        /tmp/orc/root/sbin/supervise-daemon demo --start --pidfile /run/demo.pid \\
            --respawn-delay 1 --respawn-max 0 /bin/sleep -- 1000'

Notes learnt the hard way: supervise-daemon lives in ``sbin/`` (not ``lib/rc/bin``), it refuses
``--respawn-delay 0`` ("Invalid respawn-delay value"; leave the option out for no delay), it needs
``RC_SVCNAME`` and an existing ``/run/openrc``, and ``pidfile`` holds the supervisor's pid.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["PACKAGES", "OpenRC", "busybox", "openrc", "unpacked", "unshare_problem"]

PACKAGES = ("openrc", "librc1", "libeinfo1")


class OpenRC:
    """Paths into one unpacked copy of Debian's OpenRC."""

    def __init__(self, root: Path) -> None:
        self.root = root
        """The ``dpkg -x`` directory."""

    @property
    def supervise_daemon(self) -> Path:
        return self.root / "sbin" / "supervise-daemon"

    @property
    def openrc_run(self) -> Path:
        return self.root / "sbin" / "openrc-run"

    @property
    def rc_service(self) -> Path:
        return self.root / "sbin" / "rc-service"

    @property
    def lib_rc(self) -> Path:
        """What ``openrc-run`` expects at the hard-coded ``/lib/rc``."""
        return self.root / "lib" / "rc"

    @property
    def libdir(self) -> Path:
        return self.root / "lib" / "x86_64-linux-gnu"

    def environment(self, svcname: str | None = None) -> dict[str, str]:
        """Environment for its binaries (their shared libraries are not on the system path)."""
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = str(self.libdir)
        if svcname:
            env["RC_SVCNAME"] = svcname
        return env


def _cache_dir() -> Path:
    base = os.environ.get("NODEROLE_TEST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "noderole-test"
    )
    return Path(base)


def openrc() -> OpenRC:
    """Download and unpack OpenRC once per machine (cached; safe under concurrent callers).

    Raises ``RuntimeError`` with apt's output when the packages cannot be had.
    """
    return OpenRC(unpacked("openrc", PACKAGES, "sbin/supervise-daemon"))


def busybox() -> Path:
    """Debian's static busybox, unpacked once per machine: the shell (``busybox sh``, ash) that
    runs OpenRC's runscripts on Alpine, where dash runs them on Debian."""
    return unpacked("busybox", ("busybox-static",), "bin/busybox") / "bin" / "busybox"


def unpacked(name: str, packages: tuple[str, ...], marker: str) -> Path:
    """Debian ``packages`` downloaded and unpacked together (``dpkg -x``) once per machine, in
    the test cache under ``name``; ``marker`` is a path in them that says it is done.

    Raises ``RuntimeError`` with apt's output when the packages cannot be had.
    """
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / name
    with open(cache / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / marker).exists():
            return target
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            # apt's sandbox user cannot write into root's private temp dirs: open it up.
            os.chmod(tmp, 0o777)
            done = subprocess.run(
                ["apt-get", "download", *packages], cwd=tmp, capture_output=True, text=True
            )
            debs = sorted(Path(tmp).glob("*.deb"))
            if done.returncode != 0 or len(debs) < len(packages):
                raise RuntimeError(
                    f"could not download Debian's {name} packages "
                    f"(apt-get download {' '.join(packages)}): {done.stderr.strip()}"
                )
            root = Path(tmp) / "root"
            for deb in debs:
                subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(root, target)
        return target


def unshare_problem() -> str | None:
    """Why a private mount namespace cannot be made here, or None when it can."""
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs tmpfs /mnt"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"the kernel refuses a private mount namespace: {probe.stderr.strip()}"
    return None
