"""A real unprivileged user and a scene to attack from, for the hardening tests.

:func:`user` makes a fresh system user with ``useradd`` (a unique name; its processes killed by
pid and the user removed at the end, even when the test fails). :func:`scene` gives a
world-traversable base in ``/tmp`` with a directory that user owns, a native supervisor on a node
root inside it, and root's victim files whose bytes and owner must survive whatever the user
plants.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from noderole.supervisor import ProcessSpec, Supervisor
from tests.supervisor_fixtures import Harness, close_harness

__all__ = ["TICK", "Scene", "User", "scene", "user"]

TICK = "while :; do echo tick; sleep 0.02; done"


@attrs.frozen
class User:
    name: str
    uid: int
    gid: int

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as this user (no supplementary groups)."""
        return subprocess.run(
            ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", *argv],
            capture_output=True,
            text=True,
            timeout=30,
        )


@pytest.fixture
def user() -> Iterator[User]:
    """A fresh unprivileged user, deleted at the end (its processes killed first, by pid)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (to make a user and to be the root supervisor)")
    for tool in ("useradd", "userdel", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    name = f"nrh{secrets.token_hex(4)}"
    for _ in range(20):  # another useradd may hold /etc/passwd's lock for a moment
        made = subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--shell",
             "/usr/sbin/nologin", name],
            capture_output=True, text=True,
        )  # fmt: skip
        if made.returncode == 0:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"useradd {name}: {made.stderr}")
    try:
        pw = pwd.getpwnam(name)
        yield User(name, pw.pw_uid, pw.pw_gid)
    finally:
        uid = pwd.getpwnam(name).pw_uid
        for p in os.listdir("/proc"):
            with contextlib.suppress(OSError):
                if p.isdigit() and os.stat(f"/proc/{p}").st_uid == uid:
                    os.kill(int(p), signal.SIGKILL)
        for _ in range(20):
            if subprocess.run(["userdel", name], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)


@attrs.define
class Scene:
    """A world-traversable base in /tmp, root's victim files, a service dir the user owns."""

    base: Path
    user: User
    harness: Harness
    victims: dict[Path, bytes] = attrs.field(factory=dict)

    @property
    def svc(self) -> Path:
        return self.base / "svc"

    @property
    def supervisor_log(self) -> Path:
        return self.harness.root / "var/log/noderole/supervisor.log"

    def victim(self, name: str, mode: int = 0o644) -> Path:
        path = self.base / name
        data = f"{name}: root's file, never to be written by the supervisor\n".encode()
        path.write_bytes(data)
        path.chmod(mode)
        self.victims[path] = data
        return path

    def plant(self, *argv: str) -> None:
        """The service's user runs ``argv`` (ln, mkfifo, mv) in his directory."""
        done = self.user.run(*argv)
        assert done.returncode == 0, done.stderr

    def intact(self) -> bool:
        return all(
            p.read_bytes() == data and p.stat().st_uid == 0 for p, data in self.victims.items()
        )

    def spec(self, name: str, script: str, **kwargs: Any) -> ProcessSpec:
        return self.harness.spec(
            name,
            script,
            user=self.user.name,
            stdout_log=str(self.svc / "svc.log"),
            stderr_log=str(self.svc / "svc.log"),
            pidfile=str(self.svc / "svc.pid"),
            **kwargs,
        )

    def said(self, words: str) -> bool:
        return self.supervisor_log.exists() and words in self.supervisor_log.read_text()

    def daemon_alive(self) -> bool:
        return self.harness.supervisor.daemon_pid() is not None


@pytest.fixture
def scene(user: User) -> Iterator[Scene]:
    base = Path(tempfile.mkdtemp(prefix="noderole-hard-", dir="/tmp"))
    try:
        base.chmod(0o755)  # the user must reach his directory inside
        (base / "svc").mkdir()
        os.chown(base / "svc", user.uid, user.gid)
        root = base / "root"
        root.mkdir()
        h = Harness(root=root, supervisor=Supervisor(root / "run/noderole", timeout=30))
        try:
            yield Scene(base=base, user=user, harness=h)
        finally:
            close_harness(h)
    finally:
        shutil.rmtree(base, ignore_errors=True)
