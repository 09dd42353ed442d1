"""Backends: who keeps the started services running.

The engine (:mod:`noderole.engine`) talks to one :class:`Backend`: it asks for each service's
state, starts a service with its fingerprint and stops services in order. Three implement it:

* :mod:`.native`: noderole's own supervisor daemon (any machine, a container, ``--root``);
* :mod:`.openrc`: the machine's OpenRC (``rc-service``), through rendered runscripts;
* :mod:`.systemd`: the machine's systemd (``systemctl``), through rendered units.

:mod:`.detect` picks one from the running init system. Writing runscripts and units is
:mod:`noderole.render`'s job; the init-system backends call it, then drive the init system.
This package's ``__init__`` imports nothing: importing a backend stays cheap, and the protocol
(two ``typing.Protocol`` classes, read by type checkers) is imported on first use (PEP 562).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from noderole.backends._protocol import Backend, BackendStatus
    from noderole.backends.native import NativeBackend

__all__ = ["Backend", "BackendStatus", "status_to_act_on", "stop_in_waves"]


def status_to_act_on(backend: Backend, names: Sequence[str]) -> Mapping[str, BackendStatus]:
    """The statuses of ``names`` for a caller about to act on them (``apply``, its dry run, a
    ``stop`` that stops what needs a service): a native supervisor that does not answer fails
    the call (BackendError, naming its pid and the fix), where :meth:`Backend.status` answers
    from its state file, which would have the caller leave services to a supervisor that
    respawns nothing. Other backends answer as ``status`` does."""
    act_on = getattr(backend, "status_to_act_on", None)
    return act_on(names) if act_on is not None else backend.status(names)


def stop_in_waves(backend: Backend, names: Sequence[str], waves: Sequence[Sequence[str]]) -> None:
    """Stop ``names`` in the order given; the native backend stops the services of each of
    ``waves`` (``names`` in groups that depend on none of each other) together: one
    ``stop_timeout`` per wave, not one per service that ignores its stop signal. An init
    system orders a stop of several units itself."""
    if backend.name == "native":
        cast("NativeBackend", backend).stop(names, waves=waves)
    else:
        backend.stop(names)


def __getattr__(name: str) -> Any:
    if name not in ("Backend", "BackendStatus"):
        raise AttributeError(f"module 'noderole.backends' has no attribute {name!r}")
    from noderole.backends import _protocol

    value = getattr(_protocol, name)
    globals()[name] = value
    return value
