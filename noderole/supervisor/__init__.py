"""noderole's native supervisor: one small daemon per node keeps every service's process alive.

Use :class:`Supervisor` (client) with :class:`ProcessSpec` records; read
``docs/concepts/supervision.md`` for the semantics. This package imports only the standard
library and itself: the daemon (``_daemon.py``) runs from it with nothing else loaded. Names are
imported on first use (PEP 562), so that the daemon, which imports ``noderole.supervisor._daemon``,
does not load the client.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
if TYPE_CHECKING:
    from typing import Any

    from noderole.supervisor._client import NotAnswering, OtherVersion, Supervisor, SupervisorError
    from noderole.supervisor._digest import sha256
    from noderole.supervisor._spec import ProcessSpec, ReadinessSpec, SupervisionSpec
    from noderole.supervisor._status import SchemaError, ServiceState, ServiceStatus

_WHERE = {
    "NotAnswering": "_client",
    "OtherVersion": "_client",
    "Supervisor": "_client",
    "SupervisorError": "_client",
    "ProcessSpec": "_spec",
    "ReadinessSpec": "_spec",
    "SupervisionSpec": "_spec",
    "SchemaError": "_status",
    "ServiceState": "_status",
    "ServiceStatus": "_status",
    "sha256": "_digest",
}

__all__ = [
    "NotAnswering",
    "OtherVersion",
    "ProcessSpec",
    "ReadinessSpec",
    "SchemaError",
    "ServiceState",
    "ServiceStatus",
    "SupervisionSpec",
    "Supervisor",
    "SupervisorError",
    "sha256",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'noderole.supervisor' has no attribute {name!r}")
    qualified = f"noderole.supervisor.{module}"
    __import__(qualified)
    value = getattr(sys.modules[qualified], name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
