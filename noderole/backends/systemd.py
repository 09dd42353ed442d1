"""The systemd backend: services start and stop through ``systemctl``, from rendered units."""

from __future__ import annotations

from typing import TYPE_CHECKING

from noderole.backends._initsystem import InitStatus, InitSystemBackend

if TYPE_CHECKING:
    from noderole.records import Service
    from noderole.render import Rendered

__all__ = ["InitStatus", "SystemdBackend"]

_ACTIVE_STATES = {"active": "running", "activating": "starting", "failed": "crashed"}


class SystemdBackend(InitSystemBackend):
    """Drive the machine's systemd: write ``NAME.service``, reload, ``systemctl start``."""

    name = "systemd"
    tool = "systemctl"

    def render(self, service: Service) -> list[Rendered]:
        """The unit and its ``.wants`` link."""
        from noderole.render import render_systemd

        return render_systemd([service], noderole_path=self.noderole_path)

    def query(self, name: str) -> tuple[str, int | None]:
        """``systemctl show``'s ActiveState in the engine's words, and MainPID."""
        out = self.run(
            "systemctl", "show", "-p", "ActiveState,MainPID,NRestarts", name, check=False
        ).stdout
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        state = _ACTIVE_STATES.get(props.get("ActiveState", "inactive"), "stopped")
        return state, int(props.get("MainPID", "0") or 0) or None

    def launch(self, name: str, verb: str) -> None:
        """``systemctl start|restart --no-block``: a blocking start from a unit ordered
        ``Before=`` the service would deadlock the boot."""
        self.run("systemctl", "daemon-reload")
        self.run("systemctl", verb, "--no-block", f"{name}.service")

    def halt(self, name: str) -> None:
        """``systemctl stop NAME.service``."""
        self.run("systemctl", "stop", f"{name}.service", check=False)
