"""The OpenRC backend: services start and stop through ``rc-service``, from rendered runscripts."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from noderole.backends._initsystem import InitStatus, InitSystemBackend

if TYPE_CHECKING:
    from noderole.records import Service
    from noderole.render import Rendered

__all__ = ["InitStatus", "OpenRCBackend"]

# rc-service NAME status exits 0 started, 3 stopped, 32 crashed (OpenRC's documented codes).
_STATUS_CODES = {0: "running", 3: "stopped", 32: "crashed"}

OPENRC_SVCDIR = "/run/openrc"
"""OpenRC's state directory on Linux (RC_SVCDIR): ``failed/NAME`` marks a service whose
supervisor gave up respawning it, or whose start failed, which ``status`` calls stopped."""

_FAILED = "OpenRC marks it failed: its supervisor gave up respawning it, or its start failed"


class OpenRCBackend(InitSystemBackend):
    """Drive the machine's OpenRC: write ``/etc/init.d/NAME``, then ``rc-service NAME start``."""

    name = "openrc"
    tool = "rc-service"

    def render(self, service: Service) -> list[Rendered]:
        """The runscript and its runlevel link."""
        from noderole.render import render_openrc

        return render_openrc([service], noderole_path=self.noderole_path)

    def query(self, name: str) -> InitStatus:
        """``rc-service NAME status``'s exit code in the engine's words; no pid (OpenRC's
        supervisor keeps its own)."""
        code = self.run("rc-service", name, "status", check=False).returncode
        state = _STATUS_CODES.get(code, "stopped")
        if state == "stopped" and _marked_failed(name):
            return InitStatus(name=name, state="crashed", reason=_FAILED)
        return InitStatus(name=name, state=state)

    def launch(self, name: str, verb: str) -> None:
        """``rc-service NAME start|restart``: blocks until start_pre and the start are done."""
        self.run("rc-service", name, verb)

    def written(self) -> None:
        """``rc-update -u``: OpenRC rebuilds its dependency tree only when ``/etc/init.d`` is
        newer than the tree, to the second; a runscript written or removed within the second
        the tree was built (an apply of another role right after the last) left a tree that
        still named the old one ("cannot start worker as gate-one would not start")."""
        with contextlib.suppress(OSError):  # no rc-update: the tree is left to OpenRC
            self.run("rc-update", "-u", check=False)

    def halt(self, name: str) -> None:
        """``rc-service NAME stop``; then ``zap`` for a service OpenRC still marks failed (a
        stop leaves the mark): stopped means stopped, as under the native supervisor."""
        self.run("rc-service", name, "stop", check=False)
        if _marked_failed(name):
            self.run("rc-service", name, "zap", check=False)


def _marked_failed(name: str) -> bool:
    return os.path.lexists(f"{OPENRC_SVCDIR}/failed/{name}")
