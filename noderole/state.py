"""What noderole records on the node: the applied role, what each service was started with, and
the lock that keeps two ``apply`` runs from interleaving.

Files (node paths, under ``--root``):

- ``/var/lib/noderole/role``: the applied role, one line (like the prior art's role file), so
  ``status``, ``stop`` and a later ``apply`` know it.
- ``/var/lib/noderole/applied.json``: per service, a digest of each part of its definition, so a
  restart can say *what* changed. Secrets are never written: the environment is a digest.
- ``/var/lib/noderole/last-apply.json``: what the last apply did to each service (outcome,
  reason, time), the backend, and the settings it ran with (secret settings left out), so
  ``status`` can say why a service is down, and ``status``, ``stop`` and ``restart`` still work
  while ``config.toml`` is broken.
- ``/run/noderole/apply.lock``: ``flock``-ed by ``apply`` and ``stop`` for their whole run.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from noderole.clock import Clock
from noderole.errors import LockedError
from noderole.root import NodeRoot

__all__ = [
    "APPLIED_FILE",
    "LAST_APPLY_FILE",
    "LOCK_FILE",
    "ROLE_FILE",
    "RUN_DIR",
    "node_lock",
    "read_applied",
    "read_last_apply",
    "read_role",
    "write_applied",
    "write_last_apply",
    "write_role",
]

RUN_DIR = "/run/noderole"
ROLE_FILE = "/var/lib/noderole/role"
APPLIED_FILE = "/var/lib/noderole/applied.json"
LOCK_FILE = f"{RUN_DIR}/apply.lock"
LAST_APPLY_FILE = "/var/lib/noderole/last-apply.json"


def read_last_apply(root: NodeRoot) -> dict[str, Any]:
    """The record of the last apply (empty when none or unreadable): ``role``, ``backend``,
    ``services`` (name -> ``outcome``, ``reason``, ``at``), ``settings`` (table -> key -> value)."""
    try:
        data = json.loads(root.resolve(LAST_APPLY_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_last_apply(root: NodeRoot, record: Mapping[str, Any]) -> None:
    """Replace the record of the last apply (atomically, mode 0600)."""
    from noderole.atomic import write_atomic

    path = root.resolve(LAST_APPLY_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(record, indent=1, sort_keys=True).encode(), mode=0o600)


def read_role(root: NodeRoot) -> str | None:
    """The role last applied on this node, or None."""
    try:
        text = root.resolve(ROLE_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return text or None


def write_role(root: NodeRoot, role: str) -> None:
    """Record the applied role (atomically)."""
    from noderole.atomic import write_atomic

    path = root.resolve(ROLE_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, f"{role}\n".encode(), mode=0o644)


def read_applied(root: NodeRoot) -> dict[str, dict[str, Any]]:
    """Per-service definition digests recorded by the last apply (empty when unknown)."""
    try:
        data = json.loads(root.resolve(APPLIED_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_applied(root: NodeRoot, applied: Mapping[str, Mapping[str, Any]]) -> None:
    """Record per-service definition digests (atomically, mode 0600)."""
    from noderole.atomic import write_atomic

    path = root.resolve(APPLIED_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(applied, indent=1, sort_keys=True).encode(), mode=0o600)


@contextmanager
def node_lock(root: NodeRoot, *, timeout: float, clock: Clock, what: str) -> Iterator[None]:
    """Hold the node lock for ``what``; wait up to ``timeout`` seconds for another holder.

    The holder's pid and purpose are written into the lock file so the refusal can name them.
    """
    path = root.resolve(LOCK_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        start = clock.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if clock.monotonic() - start >= timeout:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
                raise LockedError(
                    f"another noderole run holds {LOCK_FILE} ({holder}); it did not finish "
                    f"within {timeout:g}s. Wait for it, or raise --lock-timeout"
                )
            clock.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {what}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the flock
