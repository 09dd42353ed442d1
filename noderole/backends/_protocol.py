"""What the engine asks of a backend, and what it reads back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from noderole.records import Service

__all__ = ["Backend", "BackendStatus"]


class BackendStatus(Protocol):
    """What the engine reads of a service's current state (the supervisor's ServiceStatus)."""

    @property
    def state(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def reason(self) -> str: ...


class Backend(Protocol):
    """Where started services live: the native supervisor, OpenRC or systemd."""

    name: str

    def status(self, names: Sequence[str]) -> Mapping[str, BackendStatus]:
        """Current state of the named services (absent: never started)."""
        ...

    def start(self, service: Service, *, fingerprint: str) -> BackendStatus:
        """Start (or replace, when the fingerprint differs) the service's process."""
        ...

    def stop(self, names: Sequence[str]) -> Sequence[BackendStatus]:
        """Stop the services in the given order; return when every process is gone."""
        ...
