"""noderole's native supervisor: one small daemon per node keeps every service's process alive.

Use :class:`Supervisor` (client) with :class:`ProcessSpec` records; read
``docs/concepts/supervision.md`` for the semantics. The daemon itself lives in ``_daemon.py`` and
imports only the standard library.
"""

from noderole.supervisor._client import Supervisor
from noderole.supervisor._spec import ProcessSpec, ServiceState, ServiceStatus, readiness_check

__all__ = ["ProcessSpec", "ServiceState", "ServiceStatus", "Supervisor", "readiness_check"]
