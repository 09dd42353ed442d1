"""The machine's own systemd, booted as PID 1 in private namespaces that leave no trace.

How it boots (each line prevents a failure seen on these machines):

1. A fresh cgroup2 child (``/sys/fs/cgroup/unified/noderole-test-<random>`` on a hybrid layout,
   ``/sys/fs/cgroup/noderole-test-<random>`` on a unified one) receives the boot shell, so
   systemd's own cgroup tree lives there and is removed, depth first, when the namespace ends.
2. ``unshare --mount --pid --fork --uts --ipc --net --cgroup --propagation private`` makes the
   namespaces; the boot shell is their PID 1 until it ``exec``\\ s systemd.
3. The root is an overlay with ``lowerdir=/`` and its upper layer on a tmpfs (an upper layer on
   the same filesystem as ``/`` is refused): systemd never boots on the machine's own ``/``, whose
   units would all start and whose ``/tmp`` Debian's tmp.conf would empty.
4. proc, sysfs (read-only), cgroup2 at ``sys/fs/cgroup``, tmpfs on ``run``, ``tmp`` and ``dev``
   (null, zero, full, random, urandom, tty bound from the host, a new devpts, ``dev/shm``); an
   empty ``etc/machine-id``; a private ``ns.target`` so only what a test starts runs; sysctl,
   modules-load, binfmt and random-seed masked (on older kernels the sysctl write of
   ``kernel.pid_max`` reaches the machine). The machine's own enabled units never start: its
   ``/etc/systemd/system/*.wants`` are removed in the overlay, and the generators that would
   bring its boot back (sysv scripts, rc.local, fstab, gettys, database clusters) are masked.
4b. ``seed=`` copies a tree (an image built with ``noderole --root IMAGE enable``) over the
   overlay root, and ``unit="multi-user.target"`` boots it for real: what a real boot pulls in
   and a container has no use for (the first-boot prompt, gettys, dbus, logind, tmpfiles under
   the read-only binds, kernel file systems) is masked, so the boot takes about 0.25 s.
5. Directories the container must see under the fresh ``/tmp`` (a test's ``tmp_path``, the
   virtualenv) are bind-mounted read-only; a veth pair inside the private network namespace gives
   it a real non-loopback interface.
6. ``pivot_root``, then ``exec env -i container=unshare /lib/systemd/systemd --unit=ns.target``.

Driven from outside with ``nsenter -t PID -a ...`` (``-m`` alone cannot reach the bus); units and
files are written through ``/proc/PID/root``. Stopped with ``kill -s RTMIN+4 PID`` (systemd's
"halt"; SIGKILL of the namespace's init also ends every process in it, the fallback). A test
process that dies without closing takes the namespace with it: ``unshare`` carries a
parent-death SIGKILL (``setpriv --pdeathsig``) and passes "halt" on to systemd (``--kill-child``).

By hand::

    .venv/bin/python -m tests.harness.systemd_ns      # boots, prints the pid, waits for Enter
    nsenter -t PID -a systemctl list-units
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

__all__ = ["SYSTEMD", "SystemdNamespace", "systemd_problem"]

SYSTEMD = "/lib/systemd/systemd"

MASKED = (
    "systemd-sysctl.service",
    "systemd-modules-load.service",
    "proc-sys-fs-binfmt_misc.automount",
    "systemd-binfmt.service",
    "systemd-random-seed.service",
    # A real boot (multi-user.target) pulls in what follows; none of it has a place in a
    # container: a first-boot prompt on a console nobody reads, gettys, a second bus, logins,
    # /tmp emptied under the read-only binds, kernel file systems sysfs (read-only) refuses.
    "systemd-firstboot.service",
    "systemd-machine-id-commit.service",
    "systemd-repart.service",
    "systemd-pcrphase.service",
    "systemd-pcrphase-sysinit.service",
    "systemd-sysusers.service",
    "systemd-tmpfiles-setup.service",
    "systemd-tmpfiles-clean.timer",
    "kmod-static-nodes.service",
    "sys-kernel-config.mount",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "sys-fs-fuse-connections.mount",
    "dev-hugepages.mount",
    "getty.target",
    "dbus.service",
    "dbus.socket",
    "systemd-logind.service",
    "systemd-ask-password-wall.path",
    "systemd-ask-password-console.path",
)
"""Units that would touch the machine from inside the container, or slow a real boot."""

MASKED_GENERATORS = (
    # The machine's own boot would come back through these: its /etc/init.d scripts and
    # rc?.d links (sysv), rc.local, /etc/fstab's mounts, its database clusters.
    "systemd-sysv-generator",
    "systemd-rc-local-generator",
    "systemd-fstab-generator",
    "systemd-getty-generator",
    "postgresql-generator",
)

TARGET = """\
[Unit]
Description=noderole test namespace
Wants=systemd-journald.socket
AllowIsolate=yes
"""

BOOT = r"""
set -eu
scratch=$1; shift
mount -t tmpfs -o mode=0755 tmpfs "$scratch"
mkdir "$scratch/upper" "$scratch/work" "$scratch/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$scratch/upper,workdir=$scratch/work" \
    "$scratch/root"
r=$scratch/root
mount -t proc proc "$r/proc"
mount -t sysfs -o ro sysfs "$r/sys"
mount -t cgroup2 cgroup2 "$r/sys/fs/cgroup"
for d in run tmp; do mount -t tmpfs -o mode=1777 tmpfs "$r/$d"; done
chmod 0755 "$r/run"
mount -t tmpfs -o mode=0755,nosuid tmpfs "$r/dev"
for n in null zero full random urandom tty; do
    : > "$r/dev/$n"; mount --bind "/dev/$n" "$r/dev/$n"
done
mkdir "$r/dev/pts" "$r/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$r/dev/pts"
ln -s pts/ptmx "$r/dev/ptmx"
mount -t tmpfs -o mode=1777 tmpfs "$r/dev/shm"
: > "$r/etc/machine-id"
mkdir -p "$r/etc/systemd/system"
# The machine's own enabled units stay out: only what a test or the seed enables starts.
rm -rf "$r"/etc/systemd/system/*.wants
printf '%s' "$TARGET" > "$r/etc/systemd/system/ns.target"
for unit in $MASKED; do ln -sf /dev/null "$r/etc/systemd/system/$unit"; done
mkdir -p "$r/etc/systemd/system-generators"
for gen in $MASKED_GENERATORS; do ln -sf /dev/null "$r/etc/systemd/system-generators/$gen"; done
if [ -n "$SEED" ]; then cp -a "$SEED/." "$r/"; fi
for path in "$@"; do
    mkdir -p "$r$path"
    mount --bind "$path" "$r$path"
    mount -o remount,bind,ro "$r$path"
done
ip link set lo up
ip link add host0 type veth peer name host1
ip addr add 10.99.0.1/24 dev host0
ip addr add 10.99.0.2/24 dev host1
ip link set host0 up
ip link set host1 up
mkdir "$r/.oldroot"
cd "$r"
pivot_root . .oldroot
umount -l /.oldroot
rmdir /.oldroot
exec env -i container=unshare /lib/systemd/systemd --unit="$UNIT"
"""


def _cgroup2_base() -> Path | None:
    """Where a cgroup2 child can be made: the unified hierarchy, hybrid or not."""
    for base in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if (base / "cgroup.procs").exists() and (base / "cgroup.subtree_control").exists():
            return base
    return None


def systemd_problem() -> str | None:
    """Why this machine cannot boot a private systemd (None when it can)."""
    if os.geteuid() != 0:
        return "booting systemd in private namespaces needs root"
    if not os.access(SYSTEMD, os.X_OK):
        return f"{SYSTEMD} is not installed"
    for tool in ("unshare", "nsenter", "ip", "pivot_root", "setpriv", "systemctl"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH"
    if _cgroup2_base() is None:
        return "no cgroup2 hierarchy is mounted under /sys/fs/cgroup"
    return None


class SystemdNamespace:
    """One booted private systemd. Use as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        *,
        binds: Sequence[Path] = (),
        boot_timeout: float = 30,
        seed: Path | None = None,
        unit: str = "ns.target",
    ) -> None:
        self.binds = tuple(Path(p).resolve() for p in binds)
        """Host directories made visible, read-only, at the same path inside."""
        self.seed = Path(seed).resolve() if seed is not None else None
        """A tree (an image built with ``--root``) copied over the overlay root before boot."""
        self.unit = unit
        """The unit systemd boots into: the private ``ns.target`` (only what a test starts
        runs), or ``multi-user.target`` for a real boot of what the seed enables."""
        self.boot_timeout = boot_timeout
        base = _cgroup2_base()
        if base is None:  # pragma: no cover - systemd_problem() says so first
            raise RuntimeError("no cgroup2 hierarchy")
        self.cgroup = base / f"noderole-test-{uuid.uuid4().hex[:12]}"
        """The cgroup2 directory the namespace lives in (unique per instance)."""
        self._scratch = Path(tempfile.mkdtemp(prefix="noderole-systemd-"))
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None

    def __enter__(self) -> SystemdNamespace:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int:
        """Host pid of the namespace's systemd."""
        assert self._pid is not None, "the namespace is not running"
        return self._pid

    @property
    def root(self) -> Path:
        """The container's ``/``, seen from the host."""
        return Path(f"/proc/{self.pid}/root")

    def start(self) -> None:
        """Boot and wait until ``systemctl is-system-running`` answers (bounded)."""
        self.cgroup.mkdir()
        env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "TARGET": TARGET,
            "MASKED": " ".join(MASKED),
            "MASKED_GENERATORS": " ".join(MASKED_GENERATORS),
            "SEED": str(self.seed or ""),
            "UNIT": self.unit,
        }
        procs = shlex.quote(str(self.cgroup / "cgroup.procs"))
        command = (
            f"echo $$ > {procs} && exec unshare --mount --pid --fork --uts --ipc --net --cgroup "
            '--kill-child=SIGRTMIN+4 --propagation private sh -c "$BOOT" boot "$@"'
        )
        # If the test process dies without closing (killed by a timeout), unshare gets SIGKILL
        # (setpriv's parent-death signal survives the execs), and --kill-child passes "halt"
        # on to systemd: no namespace outlives the test run.
        self._proc = subprocess.Popen(
            [
                "setpriv",
                "--pdeathsig",
                "KILL",
                "sh",
                "-c",
                command,
                "sh",
                str(self._scratch),
                *map(str, self.binds),
            ],
            env={**env, "BOOT": BOOT},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            self._pid = self._find_init()
            self._wait_running()
        except BaseException:
            self.close()
            raise

    def _find_init(self) -> int:
        """The forked child of ``unshare``: PID 1 inside, systemd once it execs."""
        assert self._proc is not None
        deadline = time.monotonic() + self.boot_timeout
        children = Path(f"/proc/{self._proc.pid}/task/{self._proc.pid}/children")
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode() if self._proc.stderr else ""
                raise RuntimeError(f"the systemd namespace did not boot: {err.strip()}")
            try:
                found = children.read_text().split()
            except OSError:
                found = []
            if found:
                return int(found[0])
            time.sleep(0.01)
        raise RuntimeError(f"unshare made no child within {self.boot_timeout}s")

    def _wait_running(self) -> None:
        deadline = time.monotonic() + self.boot_timeout
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode() if self._proc.stderr else ""
                raise RuntimeError(f"the systemd namespace ended while booting: {err.strip()}")
            if os.readlink(f"/proc/{self.pid}/exe").endswith("/systemd"):
                done = self.run(
                    "systemctl",
                    "is-system-running",
                    "--wait",
                    check=False,
                    timeout=max(1.0, deadline - time.monotonic()),
                )
                state = done.stdout.strip()
                if state in ("running", "degraded"):
                    return
                if "Failed to connect" not in done.stderr and state not in ("", "offline"):
                    raise RuntimeError(f"systemd answered {state!r}: {done.stderr.strip()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"systemd did not come up within {self.boot_timeout}s")
            time.sleep(0.01)

    def run(
        self, *argv: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside every namespace of the container."""
        done = subprocess.run(
            ["nsenter", "-t", str(self.pid), "-a", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={
                "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "LANG": "C.UTF-8",
            },
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited {done.returncode}: {done.stderr}{done.stdout}"
            )
        return done

    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("systemctl", *args, check=check)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        """``systemctl show -p ...`` as a dict."""
        out = self.systemctl("show", "-p", ",".join(props), unit).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def close(self, timeout: float = 20) -> None:
        """Halt systemd (RTMIN+4), SIGKILL it by pid if it lingers, remove the cgroups."""
        proc, self._proc = self._proc, None
        pid, self._pid = self._pid, None
        try:
            if proc is not None:
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGRTMIN + 4)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    if pid is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    proc.kill()
                    proc.wait(timeout=timeout)
                if proc.stderr is not None:
                    proc.stderr.close()
        finally:
            _remove_cgroup(self.cgroup, timeout)
            shutil.rmtree(self._scratch, ignore_errors=True)


def _remove_cgroup(path: Path, timeout: float) -> None:
    """rmdir depth first; a cgroup is busy for a moment after its last process exits."""
    if not path.exists():
        return
    deadline = time.monotonic() + timeout
    for directory, _, _ in sorted(os.walk(path), key=lambda e: -e[0].count("/")):
        while True:
            try:
                os.rmdir(directory)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                # Processes left over (the fallback SIGKILL path): kill them by pid.
                try:
                    for line in Path(directory, "cgroup.procs").read_text().split():
                        os.kill(int(line), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
                time.sleep(0.01)


if __name__ == "__main__":
    with SystemdNamespace() as ns:
        print(ns.pid, flush=True)
        input("Enter ends the namespace: ")
