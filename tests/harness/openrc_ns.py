"""Debian's real OpenRC, running rendered runscripts in a private namespace that leaves no trace.

``openrc-run`` insists on hard-coded paths: ``/lib/rc`` (its shell library), ``/sbin/openrc-run``
(the ``#!`` of every runscript), ``/etc/init.d``, ``/etc/runlevels`` and ``/run/openrc``. On this
host (Debian 12, merged /usr) ``/lib`` and ``/sbin`` are symbolic links to ``usr/lib`` and
``usr/sbin``, ``/lib/rc`` and ``/etc/runlevels`` do not exist, and nothing may be created there.
The harness therefore runs a driver inside ``unshare -m -p --fork --mount-proc --kill-child
--propagation private`` and builds the view there, where every mount dies with the namespace:

1. tmpfs on ``/run``, with ``/run/openrc/{started,starting,...,scheduled}`` and
   ``/run/openrc/softlevel`` (the runlevel name).
2. A read-only overlay on the real directory behind ``/lib`` with the unpacked ``lib`` as the upper
   layer: ``/lib/rc`` appears, and ``librc.so.1``/``libeinfo.so.1`` appear in
   ``/lib/x86_64-linux-gnu``. The same for ``/sbin`` (``openrc-run``, ``supervise-daemon``): the
   ``#!/sbin/openrc-run`` line and the ``supervise-daemon`` lookup on ``PATH`` then just work.
   Overlays only add entries; the host's libraries stay where they are.
3. A writable overlay on ``/etc`` (upper layer on the ``/run`` tmpfs), then an empty tmpfs on
   ``/etc/init.d`` so OpenRC's dependency scan sees only the scripts under test (never the host's
   sysvinit scripts), then the node root's ``etc`` tree (rendered runscripts, runlevel links,
   secrets files) copied in.
4. A new pid namespace with the driver as its init: when the driver exits (or is killed, or the
   test process dies: ``--kill-child`` and the parent-death signal), the kernel kills every process
   left inside it, supervise-daemon and its children included.

The driver reads one JSON request a line on stdin (``{"sh": "..."}``), runs it with ``sh -c`` in
the namespace and answers one JSON line (``rc``, ``stdout``, ``stderr``); it reaps orphans
between requests. To rerun by hand what the tests do::

    .venv/bin/python -c 'from tests.harness.openrc import openrc; print(openrc().root)'
    unshare -m -p --fork --mount-proc --kill-child --propagation private \\
        .venv/bin/python tests/harness/openrc_ns.py ~/.cache/noderole-test/openrc NODE_ROOT
    {"sh": "openrc-run /etc/init.d/NAME start; ls /run/openrc/started"}

where ``NODE_ROOT`` holds ``etc/init.d/NAME`` (for example from ``noderole render``), one request
is typed per line, and end-of-input leaves the namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import attrs

__all__ = ["NamespaceResult", "OpenRCNamespace", "STATE_DIRS"]

STATE_DIRS = (
    "started",
    "starting",
    "stopping",
    "inactive",
    "wasinactive",
    "failed",
    "hotplugged",
    "daemons",
    "options",
    "exclusive",
    "scheduled",
)
"""``/run/openrc`` subdirectories openrc-run expects."""


@attrs.frozen
class NamespaceResult:
    """What one shell command in the namespace did."""

    rc: int
    stdout: str
    stderr: str


class OpenRCNamespace:
    """One private mount + pid namespace with OpenRC at its hard-coded paths.

    Use as a context manager (or call :meth:`close`); the namespace and every process in it are
    gone when it returns.
    """

    def __init__(self, openrc_root: Path, node_root: Path, *, runlevel: str = "default") -> None:
        self.openrc_root = openrc_root
        """The ``dpkg -x`` directory of Debian's OpenRC packages."""
        self.node_root = node_root
        """A node root whose ``etc`` tree is copied onto the namespace's ``/etc``."""
        self.runlevel = runlevel
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> OpenRCNamespace:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Enter the namespace (the driver checks every mount before answering)."""
        self._proc = subprocess.Popen(
            [
                "unshare",
                "-m",
                "-p",
                "--fork",
                "--mount-proc",
                "--kill-child",
                "--propagation",
                "private",
                sys.executable,
                __file__,
                str(self.openrc_root),
                str(self.node_root),
                self.runlevel,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
        )
        ready = self._read()
        if ready.get("ready") is not True:
            self.close()
            raise RuntimeError(f"the OpenRC namespace did not come up: {ready}")

    @property
    def pid(self) -> int:
        """Host pid of the ``unshare`` process."""
        assert self._proc is not None
        return self._proc.pid

    def sh(self, command: str, *, timeout: float = 60) -> NamespaceResult:
        """Run ``sh -c command`` inside the namespace."""
        assert self._proc is not None
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"sh": command, "timeout": timeout}) + "\n")
        self._proc.stdin.flush()
        answer = self._read()
        return NamespaceResult(rc=answer["rc"], stdout=answer["stdout"], stderr=answer["stderr"])

    def _read(self) -> dict[str, Any]:
        assert self._proc is not None
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            err = self._proc.stderr.read() if self._proc.stderr else ""
            raise RuntimeError(f"the OpenRC namespace driver exited: {err.strip()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self, timeout: float = 30) -> None:
        """Leave the namespace: end of input, then SIGKILL by pid if the driver lingers."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            proc.kill()  # --kill-child passes it on to the namespace's init
            proc.wait()
        finally:
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


# --------------------------------------------------------------------------- the driver


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


def _overlay_readonly(upper: Path, directory: str) -> None:
    """Add ``upper``'s entries over ``directory`` (its real path: /lib may be a link)."""
    real = os.path.realpath(directory)
    _mount("-t", "overlay", "overlay", "-o", f"lowerdir={upper}:{real}", real)


def _build(openrc_root: Path, node_root: Path, runlevel: str) -> None:
    _mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/run")
    for name in STATE_DIRS:
        os.makedirs(f"/run/openrc/{name}")
    Path("/run/openrc/softlevel").write_text(runlevel)
    _overlay_readonly(openrc_root / "lib", "/lib")
    _overlay_readonly(openrc_root / "sbin", "/sbin")
    os.makedirs("/run/.harness/etc-upper")
    os.makedirs("/run/.harness/etc-work")
    _mount(
        "-t",
        "overlay",
        "overlay",
        "-o",
        "lowerdir=/etc,upperdir=/run/.harness/etc-upper,workdir=/run/.harness/etc-work",
        "/etc",
    )
    _mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/etc/init.d")
    os.makedirs(f"/etc/runlevels/{runlevel}", exist_ok=True)
    # Debian's OpenRC reads insserv.conf(.d) for LSB scripts; there are none, but it complains.
    Path("/etc/insserv.conf").touch()
    os.makedirs("/etc/insserv.conf.d", exist_ok=True)
    source = node_root / "etc"
    if source.is_dir():
        shutil.copytree(source, "/etc", symlinks=True, dirs_exist_ok=True)
    for path in ("/lib/rc/sh/openrc-run.sh", "/sbin/openrc-run", "/sbin/supervise-daemon"):
        if not os.path.exists(path):
            raise RuntimeError(f"{path} is missing after the mounts")


def _reap() -> None:
    """Collect orphans re-parented to this init (supervisors that exited, their children)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _run(command: str, *, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run ``sh -c command``, reaping every orphan while it runs.

    As the namespace's init the driver inherits every daemon that exits; ``supervise-daemon
    --stop`` waits for the supervisor's pid to vanish, and a zombie never does. So the wait here
    is ``waitpid(-1)``: any child is collected, and the command's own exit ends the loop.
    """
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen(
            ["sh", "-c", command], stdout=stdout, stderr=stderr, env=env, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        code: int | None = None
        while code is None:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:  # pragma: no cover - our child is always there
                break
            if pid == proc.pid:
                code = os.waitstatus_to_exitcode(status)
            elif pid == 0:
                if time.monotonic() > deadline:
                    proc.kill()
                    os.waitpid(proc.pid, 0)
                    code = -1
                    stderr.write(f"\ntimed out after {timeout}s")
                else:
                    time.sleep(0.005)
        proc.returncode = -1 if code is None else code  # reaped here, not by Popen
        stdout.seek(0)
        stderr.seek(0)
        return {"rc": proc.returncode, "stdout": stdout.read(), "stderr": stderr.read()}


def _answer(out: IO[str], payload: dict[str, Any]) -> None:
    out.write(json.dumps(payload) + "\n")
    out.flush()


def _drive(argv: list[str]) -> int:
    openrc_root, node_root, runlevel = Path(argv[0]), Path(argv[1]), argv[2]
    out = sys.stdout
    try:
        _build(openrc_root, node_root, runlevel)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as error:
        detail = getattr(error, "stderr", "") or ""
        _answer(out, {"ready": False, "error": f"{error} {detail}".strip()})
        return 1
    _answer(out, {"ready": True})
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LD_LIBRARY_PATH": str(openrc_root / "lib" / "x86_64-linux-gnu"),
        "LANG": "C.UTF-8",
    }
    for line in sys.stdin:
        request = json.loads(line)
        _answer(out, _run(request["sh"], env=env, timeout=request.get("timeout", 60)))
        _reap()
    return 0


if __name__ == "__main__":
    sys.exit(_drive(sys.argv[1:]))
