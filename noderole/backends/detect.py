"""Which backend a node gets: the one asked for, or the init system that runs the machine."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from noderole.errors import BackendError

if TYPE_CHECKING:
    from collections.abc import Callable

    from noderole.backends import Backend
    from noderole.clock import Clock
    from noderole.records import Wait
    from noderole.root import NodeRoot

__all__ = ["BACKENDS", "backend_named", "chosen_name", "detect_init"]

BACKENDS = ("native", "openrc", "systemd")
"""Every backend name ``--backend`` and the ``backend`` setting accept (besides ``auto``)."""


def detect_init(root: NodeRoot) -> str:
    """systemd if /run/systemd/system exists, OpenRC if /run/openrc does, else native.

    Always native under --root: a rehearsal must never touch the machine's real init.
    """
    if not root.is_real:
        return "native"
    if os.path.isdir("/run/systemd/system"):
        return "systemd"
    if os.path.isdir("/run/openrc"):
        return "openrc"
    return "native"


def backend_named(
    name: str,
    root: NodeRoot,
    *,
    noderole_path: str,
    clock: Clock | None = None,
    readiness: Callable[[str], Wait | None] | None = None,
) -> Backend:
    """The backend called ``name`` for ``root`` (``auto``: :func:`detect_init`'s choice)."""
    name = chosen_name(name, root)
    if name == "native":
        from noderole.backends.native import NativeBackend

        return NativeBackend(root)
    if name == "openrc":
        from noderole.backends.openrc import OpenRCBackend

        return OpenRCBackend(root, noderole_path=noderole_path, clock=clock, readiness=readiness)
    if name == "systemd":
        from noderole.backends.systemd import SystemdBackend

        return SystemdBackend(root, noderole_path=noderole_path, clock=clock, readiness=readiness)
    raise AssertionError(name)  # pragma: no cover - chosen_name accepts only BACKENDS


def chosen_name(name: str, root: NodeRoot) -> str:
    """The backend :func:`backend_named` builds for ``name``, without importing it."""
    if name == "auto":
        return detect_init(root)
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}: use {', '.join(BACKENDS)} or auto")
    return name
