"""What the engine hands the supervisor (:class:`ProcessSpec`) and what it gets back
(:class:`ServiceStatus`). Both cross the control socket as JSON.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from noderole.records import (
    Supervision,
    Wait,
    WaitForCommand,
    WaitForHttp,
    WaitForPaths,
    WaitForSocket,
    WaitForTcp,
)

__all__ = ["ProcessSpec", "ServiceState", "ServiceStatus", "readiness_check"]

ServiceState: TypeAlias = Literal["starting", "running", "ready", "backoff", "crashed", "stopped"]


def _argv(value: Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _frozen_env(value: Mapping[str, str]) -> Mapping[str, str]:
    return types.MappingProxyType(dict(value))


def _check_argv(inst: ProcessSpec, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    if not value or not all(isinstance(a, str) for a in value) or not value[0].startswith("/"):
        raise ValueError(
            f"ProcessSpec {inst.name!r}: argv must be strings starting with an absolute path, "
            f"got {value!r}"
        )


@attrs.frozen(kw_only=True)
class ProcessSpec:
    """Everything the supervisor needs to run one service's process.

    Paths are *local* (already resolved under ``--root`` by the engine). JSON-serialisable through
    :meth:`to_wire`; the environment is sent to the daemon but never written to its state file.
    """

    name: str
    """The service name; one process per name."""
    argv: tuple[str, ...] = attrs.field(converter=_argv, validator=_check_argv)
    """The command; ``argv[0]`` is a local absolute path."""
    environment: Mapping[str, str] = attrs.field(
        factory=dict, converter=_frozen_env, hash=False, repr=False
    )
    """The child's whole environment, exactly (secrets revealed; hidden from ``repr``)."""
    user: str | None = None
    """Run as this user (name or uid); None: the supervisor's user."""
    group: str | None = None
    """Run as this group (name or gid); None: the user's primary group."""
    cwd: str = "/"
    """Working directory."""
    pidfile: str | None = None
    """Where the *child's* pid is written (rewritten on respawn, removed on stop).

    Unlike OpenRC's supervise-daemon, which stores its own pid there (openrc#163).
    """
    stdout_log: str | None = None
    """Append stdout here (parent directories are created); None: /dev/null."""
    stderr_log: str | None = None
    """Append stderr here; the same path as ``stdout_log`` shares one stream, in order."""
    log_max_bytes: int | None = None
    """Rotate a log past this size (one old copy, ``LOG.1``); None: never (logrotate + SIGHUP)."""
    supervision: Supervision = attrs.field(factory=Supervision)
    """Respawn and stop settings."""
    readiness: Mapping[str, Any] | None = attrs.field(default=None, hash=False)
    """Optional readiness check, e.g. ``{"kind": "tcp", "host": "127.0.0.1", "port": 8092,
    "timeout": 30}``; see :func:`readiness_check` and ``noderole/supervisor/_readiness.py``."""
    fingerprint: str = ""
    """Opaque hash of the service definition; a different one replaces the running process."""

    def to_wire(self) -> dict[str, Any]:
        """The JSON form the daemon reads."""
        return {
            "name": self.name,
            "argv": list(self.argv),
            "environment": dict(self.environment),
            "user": self.user,
            "group": self.group,
            "cwd": self.cwd,
            "pidfile": self.pidfile,
            "stdout_log": self.stdout_log,
            "stderr_log": self.stderr_log,
            "log_max_bytes": self.log_max_bytes,
            "supervision": attrs.asdict(self.supervision),
            "readiness": dict(self.readiness) if self.readiness is not None else None,
            "fingerprint": self.fingerprint,
        }


@attrs.frozen(kw_only=True)
class ServiceStatus:
    """One service as the supervisor sees it."""

    name: str
    """The service name."""
    state: ServiceState
    """``running`` (no readiness check, or not passed yet), ``ready``, ``backoff`` (waiting to
    respawn), ``crashed`` (gave up), ``stopped``; ``starting`` while a replacement is under way."""
    pid: int | None = None
    """The current process (its process group has the same id)."""
    started_at: float | None = None
    """Wall-clock time the current process started."""
    restarts: int = 0
    """Respawns since the service was started."""
    last_exit: str | None = None
    """How the last process ended: ``exit 3``, ``signal SIGKILL``, or why it could not start."""
    log: str | None = None
    """Where its output goes (stdout's log, else stderr's)."""
    fingerprint: str = ""
    """The fingerprint of the running definition."""
    reason: str = ""
    """Why it is in this state, for people: ``gave up after 3 respawns``, ``not ready after 3s``."""
    already_running: bool = False
    """``start``: it was already running with this fingerprint; nothing was started."""

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> ServiceStatus:
        """Build from the daemon's (or the state file's) JSON."""
        return cls(
            name=data["name"],
            state=data.get("state", "stopped"),
            pid=data.get("pid"),
            started_at=data.get("started_at"),
            restarts=int(data.get("restarts") or 0),
            last_exit=data.get("last_exit"),
            log=data.get("log"),
            fingerprint=data.get("fingerprint") or "",
            reason=data.get("reason") or "",
            already_running=bool(data.get("already_running", False)),
        )


def readiness_check(wait: Wait, local: Callable[[str], str]) -> dict[str, Any]:
    """The readiness dict for a wait record (a ``Service.readiness``); ``local`` maps node paths."""
    if isinstance(wait, WaitForTcp):
        return {"kind": "tcp", "host": wait.host, "port": wait.port, "timeout": wait.timeout}
    if isinstance(wait, WaitForHttp):
        return {"kind": "http", "url": wait.url, "timeout": wait.timeout}
    if isinstance(wait, WaitForPaths):
        paths = [local(p) for p in wait.paths]
        return {"kind": "file", "paths": paths, "require": wait.require, "timeout": wait.timeout}
    if isinstance(wait, WaitForSocket):
        return {"kind": "socket", "path": local(wait.path), "timeout": wait.timeout}
    if isinstance(wait, WaitForCommand):
        argv = [local(wait.argv[0]), *wait.argv[1:]]
        return {"kind": "command", "argv": argv, "timeout": wait.timeout}
    raise TypeError(f"not a wait record: {wait!r}")
