"""Every error noderole raises on purpose, and the exit code each one maps to.

The hierarchy, so one glance shows what can be caught::

    NoderoleError                     exit 1   base of everything below
    ├── UsageError (ValueError)       exit 2   bad command-line input
    ├── PluginError                   exit 3   a plugin failed to load or misbehaved in a hook
    ├── ConfigError (ValueError)      exit 4   config.toml: unknown key, wrong type or range
    ├── DefinitionError (ValueError)  exit 5   a record built with an invalid field
    ├── PlanError                     exit 6   no provider, a cycle, a duplicate, an unknown role
    ├── StepError                     exit 1   a pre-start step failed (a wait timed out...)
    │   └── WaitTimeout (TimeoutError)
    ├── CertificateError (ValueError) exit 7   a certificate input is unusable (a bad SAN...)
    ├── EnvFileError (ValueError)     exit 8   an environment file is missing or undecodable
    ├── LockedError                   exit 9   another `noderole apply` holds the node lock
    └── BackendError                  exit 10  the init system or supervisor refused or failed

Exit codes are one enum, :class:`ExitCode`; each error class carries its own in ``exit_code``
(click's habit), so the CLI never keeps a second table.

Internal module: import the errors from :mod:`noderole` (``noderole.ConfigError``).
"""

from __future__ import annotations

import enum
from typing import ClassVar

__all__ = [
    "BackendError",
    "CertificateError",
    "ConfigError",
    "DefinitionError",
    "EnvFileError",
    "ExitCode",
    "LockedError",
    "NoderoleError",
    "PlanError",
    "PluginError",
    "StepError",
    "UsageError",
    "WaitCancelled",
    "WaitTimeout",
]


class ExitCode(enum.IntEnum):
    """Exit status of every ``noderole`` command (documented in docs/reference/exit-codes.md)."""

    OK = 0
    """Everything asked for happened: every service runs, the plan built, the file was written."""
    FAILED = 1
    """At least one service (or step) failed; the report names which and why."""
    USAGE = 2
    """The command line was wrong (click's own convention)."""
    PLUGIN = 3
    """A plugin failed to load, or a hook raised or returned something that is not a record."""
    CONFIG = 4
    """The configuration file is unreadable, names an unknown table or key, or gives a value of
    the wrong type, outside its declared range or choices, or that a plugin's record refuses
    (``noderole config check`` lists every problem as FILE:TABLE.KEY)."""
    DEFINITION = 5
    """A plugin built a record with an invalid field: a misspelled keyword, a string where a list
    is expected, a nan or out-of-range number, a path whose ``..`` leaves the root, a bad SAN."""
    PLAN = 6
    """The role cannot be planned: unknown role, missing provider, cycle, duplicate service."""
    CERTIFICATE = 7
    """A certificate could not be minted or checked."""
    ENVFILE = 8
    """An environment file could not be decoded, or ``env show`` was given one that is missing."""
    LOCKED = 9
    """Another noderole process holds the node lock."""
    BACKEND = 10
    """The init system or the native supervisor refused the request, or the native supervisor
    is not answering (stopped by a signal, or hung: nothing is supervised): `status` then shows
    each process as /proc has it, `status --wait` ends at once, and `apply`, `stop` and
    `restart` fail after 2 s, naming its pid and the fix."""
    STARTING = 11
    """``status``: some services are still starting (in the spirit of ``cloud-init status``)."""
    WOULD_FAIL = 12
    """``plan``, ``apply --dry-run``: a service would fail for a reason known now (a ``Fail``
    step, a wait for a missing file nothing in the role produces, a need of such a service)."""
    INTERRUPTED = 130
    """Ctrl-C (SIGINT) stopped the command where it was, as a shell counts it: what it had
    started keeps running, its locks are released, and running it again carries on."""


class NoderoleError(Exception):
    """Base class of every error noderole raises on purpose.

    ``str(error)`` is one clear paragraph for a person at a console: what went wrong, naming the
    input, and what to do about it.
    """

    exit_code: ExitCode = ExitCode.FAILED


class UsageError(NoderoleError, ValueError):
    """The command line asks for something that cannot be done as written."""

    exit_code = ExitCode.USAGE


class PluginError(NoderoleError):
    """A plugin failed to import, registered a bad hook, or misbehaved inside a hook.

    The message always names the plugin (and its distribution and entry point when known) and the
    hook.
    """

    exit_code = ExitCode.PLUGIN


class ConfigError(NoderoleError, ValueError):
    """The configuration file is invalid; the message names the file, the table and the key."""

    exit_code = ExitCode.CONFIG


class DefinitionError(NoderoleError, ValueError):
    """A record was built with an invalid field; the message names the record, the field and why.

    ``field`` and ``value`` say which field was refused and what it was given, when known, so a
    value that came from config.toml can be reported as a configuration error instead.
    """

    exit_code = ExitCode.DEFINITION
    NO_VALUE: ClassVar[object] = object()
    """``value`` when the refused value is not known."""

    def __init__(self, message: str, *, field: str | None = None, value: object = NO_VALUE):
        super().__init__(message)
        self.field = field
        """The refused field, or None."""
        self.value = value
        """The value it was given, or :attr:`NO_VALUE`."""


class PlanError(NoderoleError):
    """The role cannot be turned into an ordered plan."""

    exit_code = ExitCode.PLAN


class StepError(NoderoleError):
    """A pre-start step failed; ``str()`` is the reason shown next to the service."""

    exit_code = ExitCode.FAILED


class WaitTimeout(StepError, TimeoutError):
    """A bounded wait ran out of time; the message names what is still missing and for how long."""


class WaitCancelled(StepError):
    """A wait was given up before its bound because what it waited for can no longer come."""


class CertificateError(NoderoleError, ValueError):
    """Certificate inputs are unusable: a bad SAN, a CA key that does not match, an expired CA..."""

    exit_code = ExitCode.CERTIFICATE


class EnvFileError(NoderoleError, ValueError):
    """An environment file cannot be read or decoded (or, for ``env show``, does not exist)."""

    exit_code = ExitCode.ENVFILE


class LockedError(NoderoleError):
    """Another noderole process holds the node lock and did not release it in time."""

    exit_code = ExitCode.LOCKED


class BackendError(NoderoleError):
    """The init system or the native supervisor refused or failed a request."""

    exit_code = ExitCode.BACKEND
