"""The systemd backend: services start and stop through ``systemctl``, from rendered units."""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any

from noderole import recordclass
from noderole.backends._initsystem import InitStatus, InitSystemBackend, failure

if TYPE_CHECKING:
    from collections.abc import Iterable

    from noderole.records import Service
    from noderole.render import Rendered
    from noderole.root import NodeRoot

__all__ = ["UNIT_DIRECTORIES", "InitStatus", "SystemdBackend", "reload_after_removal"]

UNIT_DIRECTORIES = ("/etc/systemd/", "/run/systemd/system/", "/lib/systemd/", "/usr/lib/systemd/")
"""Node paths under which a removed file can be a unit systemd still holds loaded."""


def reload_after_removal(root: NodeRoot, removed: Iterable[str]) -> bool:
    """``systemctl daemon-reload`` when ``removed`` holds a unit file or link and systemd runs
    this node (True when it ran).

    Without it systemd keeps the removed units loaded (``LoadState=loaded``, dependencies and
    all) until the next reload or boot. Never under ``--root`` (an image build: the image's
    systemd reads its units when it boots), nor on a machine systemd does not run. A failed
    reload is reported, not raised: the files are gone either way.
    """
    import os
    import subprocess
    import sys

    if not root.is_real or not os.path.isdir("/run/systemd/system"):
        return False
    if not any(path.startswith(UNIT_DIRECTORIES) for path in removed):
        return False
    try:
        done = subprocess.run(
            ["systemctl", "daemon-reload"], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"noderole: warning: systemctl daemon-reload: {exc}", file=sys.stderr)
        return False
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        print(
            f"noderole: warning: systemctl daemon-reload failed (exit {done.returncode}): "
            f"{detail}; run it yourself so systemd forgets the removed units",
            file=sys.stderr,
        )
        return False
    return True


class SystemdBackend(InitSystemBackend):
    """Drive the machine's systemd: write ``NAME.service``, reload, ``systemctl start``."""

    name = "systemd"
    tool = "systemctl"

    def __init__(self, root: NodeRoot, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self._reloading = threading.Lock()
        self._reload_began = -math.inf
        """When the last ``daemon-reload`` began (monotonic): it covers every unit written
        before."""
        self._stale: dict[str, bool] = {}
        """Per service, ``NeedDaemonReload`` as the last :meth:`query` read it (a start queries
        right after writing the unit, then launches)."""

    def render(self, service: Service) -> list[Rendered]:
        """The unit and its ``.wants`` link."""
        from noderole.render import render_systemd

        return render_systemd([service], noderole_path=self.noderole_path)

    def query(self, name: str) -> InitStatus:
        """``systemctl show``: state, main pid, restarts (``NRestarts``), the main process's start
        time, and systemd's ``Result`` as the reason when it is not ``success``."""
        out = self.run(
            "systemctl",
            "show",
            "--timestamp=unix",
            "-p",
            "ActiveState,SubState,MainPID,NRestarts,ExecMainStartTimestamp,"
            "ExecMainStartTimestampMonotonic,Result,RestartUSec,NeedDaemonReload",
            f"{name}.service",
            check=False,
        ).stdout
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        self._stale[name] = props.get("NeedDaemonReload") == "yes"
        active = props.get("ActiveState", "inactive")
        # "activating (auto-restart)" is systemd waiting RestartSec after a crash: down until
        # Restart= brings it back, as the native supervisor's backoff is; "failed" is systemd
        # giving up (StartLimitBurst), the native crashed. An apply fails the dependents of a
        # crashed service, never of one that respawns.
        if active == "activating" and props.get("SubState") == "auto-restart":
            state = "backoff"
        else:
            state = {"active": "running", "activating": "starting", "reloading": "running"}.get(
                active, "crashed" if active == "failed" else "stopped"
            )
        stamp = props.get("ExecMainStartTimestamp", "").lstrip("@")
        try:
            started_at: float | None = float(stamp) if stamp else None
        except ValueError:
            started_at = None
        forked = props.get("ExecMainStartTimestampMonotonic", "")
        # Microseconds of CLOCK_MONOTONIC, the clock of time.monotonic(); 0: never started.
        started_monotonic = int(forked) / 1e6 if forked.isdigit() and forked != "0" else None
        result = props.get("Result", "success")
        restarts = props.get("NRestarts", "0")
        reason = "" if result == "success" else result
        if state == "backoff":  # as the native supervisor says it ("respawn in 5s")
            reason = f"systemd restarts it {props.get('RestartUSec') or 'soon'} after it ended"
            reason += f" ({result})" if result != "success" else ""
        return InitStatus(
            name=name,
            state=state,
            pid=int(props.get("MainPID", "0") or 0) or None,
            reason=reason,
            restarts=int(restarts) if restarts.isdigit() else 0,
            started_at=started_at,
            started_monotonic=started_monotonic,
        )

    def settled(self, name: str, timeout: float = 30.0) -> InitStatus:
        """The state once the start job has left systemd's queue (bounded).

        Right after ``start --no-block`` the job may still wait behind the unit's dependencies,
        and ``ActiveState`` says ``inactive`` for a service that is about to start: reading it
        then would report a failure that is not one.
        """
        deadline = self.clock.monotonic() + timeout
        unit = f"{name}.service"
        while True:
            job = self.run("systemctl", "show", "-p", "Job", "--value", unit, check=False)
            status = self.query(name)
            if not job.stdout.strip() or status.state not in ("stopped", "crashed"):
                return status
            if self.clock.monotonic() >= deadline:
                return recordclass.evolve(
                    status, state="starting", reason=f"start job still queued after {timeout:g}s"
                )
            self.clock.sleep(0.02)

    def record_milestone(self, service: Service) -> None:
        """Write the unit of a service without a command (the engine ran its steps).

        Dependents name it in ``Requires=`` (k3s needs ``k3s-cluster``, the alias of
        ``k3s-cluster-init``): without its unit systemd refuses their start with "Unit
        k3s-cluster.service not found". Starting it is left to systemd, which pulls it in
        through those ``Requires=`` lines.
        """
        from noderole.render import write_rendered

        write_rendered(self.render(service), root=self.root)
        self._reload_if_stale(f"{service.name}.service", time.monotonic())

    def launch(self, name: str, verb: str) -> None:
        """``systemctl start|restart --no-block``: a blocking start from a unit ordered
        ``Before=`` the service would deadlock the boot.

        ``daemon-reload`` only where it is needed: each one reads every unit again (5 s with
        200 units here, so one per start made an apply quadratic). A unit systemd holds that
        changed on disk says ``NeedDaemonReload=yes``; a new one systemd loads when it is
        started (since systemd 246); one it still cannot find ("not found") gets a reload and
        a second try. Threads starting at once share one reload."""
        unit = f"{name}.service"
        written = time.monotonic()  # the unit was written before this call
        stale = self._stale.pop(name, None)  # read by the query a start makes after writing
        if stale is None:
            self._reload_if_stale(unit, written)
        elif stale:
            self._reload(written)
        done = self.run("systemctl", verb, "--no-block", unit, check=False)
        if done.returncode != 0 and "not found" in done.stderr:
            self._reload(written)
            self.run("systemctl", verb, "--no-block", unit)
        elif done.returncode != 0:
            raise failure(done)

    def _reload_if_stale(self, unit: str, written: float) -> None:
        """``daemon-reload`` when systemd holds an older version of ``unit`` than the disk."""
        need = self.run("systemctl", "show", "-p", "NeedDaemonReload", "--value", unit, check=False)
        if need.stdout.strip() == "yes":
            self._reload(written)

    def _reload(self, written: float) -> None:
        """One ``daemon-reload`` that began after ``written`` (a monotonic time): made here, or
        by another thread meanwhile, whose reload covers this one's files too."""
        with self._reloading:
            if self._reload_began > written:
                return
            began = time.monotonic()
            self.run("systemctl", "daemon-reload")
            self._reload_began = began

    def halt(self, name: str) -> None:
        """``systemctl stop NAME.service``."""
        self.run("systemctl", "stop", f"{name}.service", check=False)
