"""Driving OpenRC or systemd: render, enable and start through the machine's own init system.

``apply --backend openrc|systemd`` uses the same engine as the native backend: the engine runs the
pre-start steps and orders the services; this backend writes each service's runscript or unit,
enables it, and asks the init system to start it (``rc-service NAME start``; ``systemctl start
--no-block NAME`` — a blocking start from a unit ordered ``Before=`` the service deadlocks the
boot). The init system runs ``noderole hook NAME start-pre`` again as part of its own start; the
steps are idempotent, so the second run finds everything in place.

Idempotency: the fingerprint each service was started with is kept in
``/var/lib/noderole/init-fingerprints.json``; a service whose fingerprint did not change and that
the init system reports running is left alone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from noderole.errors import BackendError
from noderole.records import Service, Wait

if TYPE_CHECKING:
    from noderole.cli._app import App

__all__ = ["FINGERPRINTS", "InitBackend", "InitStatus"]

FINGERPRINTS = "/var/lib/noderole/init-fingerprints.json"


@attrs.frozen(kw_only=True)
class InitStatus:
    """A service's state as the init system reports it."""

    name: str
    state: str
    pid: int | None = None
    fingerprint: str = ""
    reason: str = ""
    restarts: int = 0
    last_exit: str | None = None
    started_at: float | None = None


class InitBackend:
    """OpenRC (``kind="openrc"``) or systemd (``kind="systemd"``)."""

    def __init__(self, app: App, kind: str) -> None:
        if kind not in ("openrc", "systemd"):
            raise BackendError(f"unknown backend {kind!r}: use native, openrc or systemd")
        self.app = app
        self.name = kind
        self._checks: dict[str, Wait | None] = {}
        tool = "rc-service" if kind == "openrc" else "systemctl"
        if shutil.which(tool) is None:
            raise BackendError(
                f"backend {kind} needs {tool}, which is not on PATH: is {kind} the init system "
                "of this machine? Use --backend native otherwise"
            )

    # ---------------------------------------------------------------- helpers

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=600)
        if check and done.returncode != 0:
            detail = (done.stderr or done.stdout).strip()
            raise BackendError(f"{' '.join(argv)} failed (exit {done.returncode}): {detail}")
        return done

    def _fingerprints(self) -> dict[str, str]:
        try:
            data = json.loads(self.app.root.resolve(FINGERPRINTS).read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _remember(self, name: str, fingerprint: str) -> None:
        from noderole.atomic import write_atomic

        data = {**self._fingerprints(), name: fingerprint}
        path = self.app.root.resolve(FINGERPRINTS)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode(), mode=0o644)

    def _render(self, service: Service) -> None:
        from noderole.backends import render_openrc, render_systemd, write_rendered

        noderole_path = str(self.app.config.table("noderole")["noderole_path"])
        render = render_openrc if self.name == "openrc" else render_systemd
        write_rendered(render([service], noderole_path=noderole_path), root=self.app.root)

    # ---------------------------------------------------------------- Backend protocol

    def status(self, names: Sequence[str]) -> Mapping[str, InitStatus]:
        """Each service's state from ``rc-service NAME status`` or ``systemctl show``."""
        remembered = self._fingerprints()
        found: dict[str, InitStatus] = {}
        for name in names:
            if self.name == "openrc":
                code = self._run("rc-service", name, "status", check=False).returncode
                # rc-service status: 0 started, 3 stopped, 32 crashed (OpenRC's documented codes)
                state = {0: "running", 3: "stopped", 32: "crashed"}.get(code, "stopped")
                pid = None
            else:
                found[name] = self._systemd_status(name, remembered.get(name, ""))
                continue
            found[name] = InitStatus(
                name=name, state=state, pid=pid, fingerprint=remembered.get(name, "")
            )
        return found

    def _systemd_status(self, name: str, fingerprint: str) -> InitStatus:
        """``systemctl show``: state (``ready`` once the readiness check passes), main pid,
        restarts and the main process's start time."""
        out = self._run(
            "systemctl",
            "show",
            "--timestamp=unix",
            "-p",
            "ActiveState,SubState,MainPID,NRestarts,ExecMainStartTimestamp,Result",
            f"{name}.service",
            check=False,
        ).stdout
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        active = props.get("ActiveState", "inactive")
        # "activating (auto-restart)" is systemd waiting RestartSec after a crash: the
        # service is down until Restart= brings it back.
        if active == "activating" and props.get("SubState") == "auto-restart":
            state = "crashed"
        else:
            state = {"active": "running", "activating": "starting", "reloading": "running"}.get(
                active, "crashed" if active == "failed" else "stopped"
            )
        if state == "running" and self._is_ready(name):
            state = "ready"
        stamp = props.get("ExecMainStartTimestamp", "").lstrip("@")
        try:
            started_at: float | None = float(stamp) if stamp else None
        except ValueError:
            started_at = None
        result = props.get("Result", "success")
        return InitStatus(
            name=name,
            state=state,
            pid=int(props.get("MainPID", "0") or 0) or None,
            fingerprint=fingerprint,
            reason="" if result == "success" else result,
            restarts=int(props.get("NRestarts", "0") or 0),
            started_at=started_at,
        )

    def _readiness(self, name: str) -> Wait | None:
        """The readiness check of ``name`` (from the services started by this process, else
        from the plugins, evaluated once)."""
        if name not in self._checks:
            for service in self.app.plugins.services(self.app.node):
                self._checks.setdefault(service.name, service.readiness)
        return self._checks.get(name)

    def _is_ready(self, name: str) -> bool:
        """True when ``name`` has a readiness check and it passes right now."""
        from noderole.waits import missing

        check = self._readiness(name)
        return check is not None and not missing(check, root=self.app.root)

    def start(self, service: Service, *, fingerprint: str) -> InitStatus:
        """Render, enable and start ``service``; restart it when it already runs."""
        self._checks[service.name] = service.readiness
        self._render(service)
        current = self.status([service.name])[service.name]
        verb = "restart" if current.state in ("running", "ready", "starting") else "start"
        if self.name == "openrc":
            self._run("rc-service", service.name, verb)
            self._remember(service.name, fingerprint)
            return attrs.evolve(self.status([service.name])[service.name], fingerprint=fingerprint)
        self._run("systemctl", "daemon-reload")
        self._run("systemctl", verb, "--no-block", f"{service.name}.service")
        status = self._systemd_settled(service.name)
        if status.state not in ("crashed", "stopped"):
            # Only a start that took is remembered: otherwise the next apply would find the
            # fingerprint and call a dead service "already running".
            self._remember(service.name, fingerprint)
        return attrs.evolve(status, fingerprint=fingerprint)

    def _systemd_settled(self, name: str, timeout: float = 30.0) -> InitStatus:
        """The state once the start job has left systemd's queue (bounded).

        Right after ``start --no-block`` the job may still wait behind the unit's dependencies,
        and ``ActiveState`` says ``inactive`` for a service that is about to start: reading it
        then would report a failure that is not one.
        """
        clock = self.app.clock
        deadline = clock.monotonic() + timeout
        unit = f"{name}.service"
        while True:
            job = self._run("systemctl", "show", "-p", "Job", "--value", unit, check=False)
            status = self._systemd_status(name, "")
            if not job.stdout.strip() or status.state not in ("stopped", "crashed"):
                return status
            if clock.monotonic() >= deadline:
                return attrs.evolve(
                    status, state="starting", reason=f"start job still queued after {timeout:g}s"
                )
            clock.sleep(0.02)

    def record_milestone(self, service: Service) -> None:
        """Write the unit of a service without a command (the engine ran its steps).

        Dependents name it in ``Requires=`` (k3s needs ``k3s-cluster``, the alias of
        ``k3s-cluster-init``): without its unit systemd refuses their start with "Unit
        k3s-cluster.service not found". Starting it is left to systemd, which pulls it in
        through those ``Requires=`` lines.
        """
        if self.name != "systemd":
            return
        self._render(service)
        self._run("systemctl", "daemon-reload")

    def stop(self, names: Sequence[str]) -> list[InitStatus]:
        """Stop in order through the init system."""
        for name in names:
            if self.name == "openrc":
                self._run("rc-service", name, "stop", check=False)
            else:
                self._run("systemctl", "stop", f"{name}.service", check=False)
        return list(self.status(names).values())
