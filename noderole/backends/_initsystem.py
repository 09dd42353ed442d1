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
from noderole.records import Service

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
                out = self._run(
                    "systemctl", "show", "-p", "ActiveState,MainPID,NRestarts", name, check=False
                ).stdout
                props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
                active = props.get("ActiveState", "inactive")
                state = {"active": "running", "activating": "starting", "failed": "crashed"}.get(
                    active, "stopped"
                )
                pid = int(props.get("MainPID", "0") or 0) or None
            found[name] = InitStatus(
                name=name, state=state, pid=pid, fingerprint=remembered.get(name, "")
            )
        return found

    def start(self, service: Service, *, fingerprint: str) -> InitStatus:
        """Render, enable and start ``service``; restart it when it already runs."""
        self._render(service)
        current = self.status([service.name])[service.name]
        verb = "restart" if current.state in ("running", "starting") else "start"
        if self.name == "openrc":
            self._run("rc-service", service.name, verb)
        else:
            self._run("systemctl", "daemon-reload")
            self._run("systemctl", verb, "--no-block", f"{service.name}.service")
        self._remember(service.name, fingerprint)
        return attrs.evolve(self.status([service.name])[service.name], fingerprint=fingerprint)

    def stop(self, names: Sequence[str]) -> list[InitStatus]:
        """Stop in order through the init system."""
        for name in names:
            if self.name == "openrc":
                self._run("rc-service", name, "stop", check=False)
            else:
                self._run("systemctl", "stop", f"{name}.service", check=False)
        return list(self.status(names).values())
