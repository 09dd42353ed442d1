"""What the supervisor is asked to run: :class:`ProcessSpec`, decoded once into typed records.

The engine's side (``noderole/backends/native.py``) builds a spec from a
:class:`~noderole.records.Service`; the spec crosses the control socket as JSON
(:meth:`ProcessSpec.to_wire`) and the daemon decodes it with :meth:`ProcessSpec.from_wire`, which
checks every field and names the first bad one. From then on the daemon reads attributes, never
``dict.get``. Standard library only (the daemon imports it): frozen, slotted records
(:mod:`noderole.supervisor._record`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from types import MappingProxyType

from noderole.supervisor._record import field, fields, record
from noderole.supervisor.probes import Probe, probe_from_wire, probe_to_wire

TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
if TYPE_CHECKING:
    from typing import Any

__all__ = ["DEFAULT_READINESS_TIMEOUT", "ProcessSpec", "ReadinessSpec", "SupervisionSpec"]

DEFAULT_READINESS_TIMEOUT = 60.0
"""Seconds a readiness check runs when the spec gives no timeout."""


def _number(where: str, value: object, *, positive: bool = False, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{where} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return value


@record()
class SupervisionSpec:
    """Respawn and stop settings (the wire form of :class:`~noderole.records.Supervision`)."""

    respawn_delay: float = 5.0
    respawn_max: int = 0
    respawn_period: float | None = None
    backoff_max: float | None = None
    stop_signal: str = "SIGTERM"
    stop_timeout: float = 5.0
    stop_scope: str = "group"
    """``"group"``: a stop, and the process's exit, end its process group; ``"process"``: the
    process alone (what it started runs on)."""
    open_files: int | None = None
    """The limit of open files the process starts with; None: the one the daemon was given."""

    def __post_init__(self) -> None:
        _number("supervision.respawn_delay", self.respawn_delay)
        _number("supervision.stop_timeout", self.stop_timeout)
        _number("supervision.respawn_period", self.respawn_period, positive=True, optional=True)
        _number("supervision.backoff_max", self.backoff_max, positive=True, optional=True)
        if type(self.respawn_max) is not int or not 0 <= self.respawn_max < 2**31:
            raise ValueError(f"supervision.respawn_max must be a count, got {self.respawn_max!r}")
        name = self.stop_signal
        if not isinstance(name, str) or not _is_signal(_full_name(name)):
            raise ValueError(f"supervision.stop_signal must name a signal, got {name!r}")
        files = self.open_files
        if files is not None and (type(files) is not int or not 3 <= files < 2**31):
            raise ValueError(f"supervision.open_files must be a count of files, got {files!r}")
        if self.stop_scope not in ("group", "process"):
            raise ValueError(
                f"supervision.stop_scope must be 'group' or 'process', got {self.stop_scope!r}"
            )

    @property
    def whole_group(self) -> bool:
        """True when a stop and an exit end the process group, not the process alone."""
        return self.stop_scope == "group"

    @property
    def stop_signum(self) -> int:
        """``stop_signal`` as a number."""
        import signal  # the daemon's, which has it loaded; a client's spec only names it

        return int(getattr(signal, _full_name(self.stop_signal)))


_COMMON_SIGNALS = frozenset(
    {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGKILL", "SIGUSR1", "SIGUSR2"}
)
"""Stop signals every POSIX system has, known without the ``signal`` module: its import builds
three enums, 3M instructions of a boot's apply, whose specs name SIGTERM nearly always (the same
shortcut as ``noderole.records``' check; this package imports nothing of noderole's)."""


def _full_name(name: str) -> str:
    return name if name.startswith("SIG") else f"SIG{name}"


def _is_signal(name: str) -> bool:
    if name in _COMMON_SIGNALS:
        return True
    import signal

    return isinstance(getattr(signal, name, None), signal.Signals)


@record()
class ReadinessSpec:
    """When the service counts as ready: ``probe`` holds, checked until ``timeout``."""

    probe: Probe
    timeout: float = DEFAULT_READINESS_TIMEOUT

    def __post_init__(self) -> None:
        _number("readiness.timeout", self.timeout, positive=True)


def _passable(text: str) -> bool:
    """True when ``text`` can be an argument or environment string of a program: no NUL, and
    encodable as the file system encoding encodes it (what exec is given)."""
    if "\0" in text:
        return False
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        return False
    return True


@record()
class ProcessSpec:
    """Everything the supervisor needs to run one service's process.

    Paths are *local* (already resolved under ``--root``). The environment is sent to the daemon
    but never written to its state file, and hidden from ``repr``.
    """

    name: str
    """The service name; one process per name."""
    argv: tuple[str, ...]
    """The command; ``argv[0]`` is a local absolute path."""
    environment: Mapping[str, str] = field(default_factory=dict, repr=False, hash=False)
    """The child's whole environment, exactly (secrets revealed)."""
    user: str | None = None
    """Run as this user (name or uid); None: the supervisor's user."""
    group: str | None = None
    """Run as this group (name or gid); None: the user's primary group."""
    cwd: str = "/"
    """Working directory."""
    pidfile: str | None = None
    """Where the *child's* pid is written (rewritten on respawn, removed on stop).

    Unlike OpenRC's supervise-daemon, which stores its own pid there (openrc#163)."""
    stdout_log: str | None = None
    """Append stdout here (parent directories are created); None: /dev/null."""
    stderr_log: str | None = None
    """Append stderr here; the same path as ``stdout_log`` shares one stream, in order."""
    log_max_bytes: int | None = None
    """Rotate a log past this size (one old copy, ``LOG.1``); None: never (logrotate + SIGHUP)."""
    supervision: SupervisionSpec = field(default_factory=SupervisionSpec)
    """Respawn and stop settings."""
    readiness: ReadinessSpec | None = None
    """Optional readiness check."""
    fingerprint: str = ""
    """Opaque hash of the service definition; a different one replaces the running process."""

    def __post_init__(self) -> None:
        argv: object = self.argv
        if isinstance(argv, str) or not isinstance(argv, tuple | list):
            raise ValueError(f"ProcessSpec {self.name!r}: argv must be a list, got {self.argv!r}")
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "environment", MappingProxyType(dict(self.environment)))
        argv = self.argv
        if not argv or not all(isinstance(a, str) for a in argv) or not argv[0].startswith("/"):
            raise ValueError(
                f"ProcessSpec {self.name!r}: argv must be strings starting with an absolute path, "
                f"got {argv!r}"
            )
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ProcessSpec: name must be a non-empty string, got {self.name!r}")
        for arg in argv:
            if not _passable(arg):
                raise ValueError(
                    f"ProcessSpec {self.name!r}: argv has {arg!r}, which cannot be passed to a "
                    "program (NUL or not encodable)"
                )
        for key, value in self.environment.items():
            if not (isinstance(key, str) and key and "=" not in key and _passable(key)):
                raise ValueError(
                    f"ProcessSpec {self.name!r}: environment has the name {key!r}, which cannot "
                    "be passed to a program (empty, '=', NUL or not encodable)"
                )
            if not (isinstance(value, str) and _passable(value)):
                # The value is never shown: it may be a revealed secret.
                raise ValueError(
                    f"ProcessSpec {self.name!r}: environment {key} has a value that cannot be "
                    "passed to a program (not a string, NUL or not encodable)"
                )
        if self.log_max_bytes is not None and (
            type(self.log_max_bytes) is not int or self.log_max_bytes <= 0
        ):
            raise ValueError(
                f"ProcessSpec {self.name!r}: log_max_bytes must be a positive integer, "
                f"got {self.log_max_bytes!r}"
            )

    @property
    def log(self) -> str | None:
        """Where its output goes (stdout's log, else stderr's)."""
        return self.stdout_log or self.stderr_log

    def to_wire(self) -> dict[str, Any]:
        """The JSON form the daemon reads."""
        sup = self.supervision
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
            "supervision": {name: getattr(sup, name) for name in fields(type(sup))},
            "readiness": None
            if self.readiness is None
            else {"probe": probe_to_wire(self.readiness.probe), "timeout": self.readiness.timeout},
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_wire(cls, data: object) -> ProcessSpec:
        """Decode :meth:`to_wire`'s form; ValueError names the first bad field."""
        if not isinstance(data, dict):
            raise ValueError(f"a spec must be a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - set(fields(cls)))
        if unknown:
            raise ValueError(f"spec: unknown field {unknown[0]!r}")
        name = data.get("name")
        where = f"spec {name!r}"
        for key in ("user", "group", "pidfile", "stdout_log", "stderr_log"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise ValueError(f"{where}: {key} must be a string or null, got {data[key]!r}")
        for key in ("cwd", "fingerprint"):
            if key in data and not isinstance(data[key], str):
                raise ValueError(f"{where}: {key} must be a string, got {data[key]!r}")
        env = data.get("environment") or {}
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ValueError(f"{where}: environment must map strings to strings")
        sup = data.get("supervision") or {}
        if not isinstance(sup, dict):
            raise ValueError(f"{where}: supervision must be an object, got {sup!r}")
        try:
            supervision = SupervisionSpec(**sup)
        except TypeError as e:
            raise ValueError(f"{where}: supervision: {e}") from None
        readiness = None
        ready = data.get("readiness")
        if ready is not None:
            if not isinstance(ready, dict) or "probe" not in ready:
                raise ValueError(f"{where}: readiness must be an object with a probe")
            readiness = ReadinessSpec(
                probe=probe_from_wire(ready["probe"]),
                timeout=ready.get("timeout", DEFAULT_READINESS_TIMEOUT),
            )
        return cls(
            name=name,  # type: ignore[arg-type]  # checked in __post_init__
            argv=data.get("argv"),  # type: ignore[arg-type]
            environment=env,
            user=data.get("user"),
            group=data.get("group"),
            cwd=data.get("cwd", "/"),
            pidfile=data.get("pidfile"),
            stdout_log=data.get("stdout_log"),
            stderr_log=data.get("stderr_log"),
            log_max_bytes=data.get("log_max_bytes"),
            supervision=supervision,
            readiness=readiness,
            fingerprint=data.get("fingerprint", ""),
        )
