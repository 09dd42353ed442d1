"""The systemd backend: services start and stop through ``systemctl``, from rendered units."""

from __future__ import annotations

import math
import re
import threading
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from noderole import recordclass
from noderole.backends._initsystem import InitStatus, InitSystemBackend, failure

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

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


QUEUE_BOUND = 30.0
"""Seconds a start waits for its job to leave systemd's queue before reporting it under way."""

_JOB = re.compile(r"^(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")
_WAITING_FOR = re.compile(r"waiting for job (\d+) ")
_SHOWN = 3
"""Jobs named at most in each list of what a queued start waits for."""


class _Job(NamedTuple):
    unit: str
    kind: str
    state: str
    waits_for: list[str]


def _parse_jobs(listing: str) -> dict[str, _Job]:
    """``systemctl list-jobs --after --before --no-legend``: a line per job (``ID UNIT TYPE
    STATE``), under it a ``waiting for job ID (UNIT/TYPE)`` line per job it waits for."""
    jobs: dict[str, _Job] = {}
    current: _Job | None = None
    for line in listing.splitlines():
        if found := _JOB.match(line):
            job_id, unit, kind, state = found.groups()
            current = jobs[job_id] = _Job(unit, kind, state, [])
        elif current is not None and (waiting := _WAITING_FOR.search(line)):
            current.waits_for.append(waiting.group(1))
    return jobs


def _behind(jobs: dict[str, _Job], name: str) -> str:
    """What the queued start of ``name`` waits for: the jobs of its ``After=`` units and,
    where those wait in turn, the ones at the head of the line (under way, or waiting for no
    other job)."""
    unit = f"{name}.service"
    mine = next((job for job in jobs.values() if job.unit == unit), None)
    if mine is None:
        return ""
    direct = [i for i in mine.waits_for if i in jobs]
    if not direct:
        return " (it waits for no other job: systemd has not run it yet)"
    heads: list[str] = []
    seen: set[str] = set()
    todo = list(direct)
    while todo:
        job_id = todo.pop(0)
        if job_id in seen or job_id not in jobs:
            continue
        seen.add(job_id)
        ahead = [i for i in jobs[job_id].waits_for if i in jobs]
        if ahead:
            todo += ahead
        elif job_id not in direct:
            heads.append(job_id)

    def named(ids: list[str]) -> str:
        shown = [f"{jobs[i].unit} ({jobs[i].kind}, {jobs[i].state})" for i in ids[:_SHOWN]]
        more = f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else ""
        return ", ".join(shown) + more

    said = f", waiting for {named(direct)}"
    return said + (f"; first in line: {named(heads)}" if heads else "")


def _stale(props: Mapping[str, str]) -> bool:
    """Whether ``systemctl show``'s ``NeedDaemonReload`` and ``LoadState`` of a unit just
    written say systemd must reload to start it: it holds an older version, or it cannot load
    the one on disk (``not-found``: a unit still active when its file was removed, which
    systemd keeps as ``not-found active`` and then refuses with "failed to load properly";
    ``error``). A new unit systemd loads when asked (since systemd 246): no reload."""
    return props.get("NeedDaemonReload") == "yes" or props.get("LoadState") in (
        "error",
        "not-found",
    )


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
        self._failed: dict[str, bool] = {}
        """Per service, whether the last :meth:`query` found it ``failed`` (systemd gave up)."""

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
            "ExecMainStartTimestampMonotonic,Result,RestartUSec,NeedDaemonReload,Job,LoadState",
            f"{name}.service",
            check=False,
        ).stdout
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        self._stale[name] = _stale(props)
        active = props.get("ActiveState", "inactive")
        self._failed[name] = active == "failed"
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
        # A job on a unit that is down is its start (or restart), waiting for its turn: systemd
        # runs a job once the jobs of its After= units are done.
        queued = bool(props.get("Job")) and state in ("stopped", "crashed")
        if queued:
            state, reason = "starting", "start job queued"
        if active == "failed" and restarts.isdigit() and int(restarts):
            # Restart=always, so a failed unit is one systemd stopped restarting (StartLimitBurst)
            plural = "s" if restarts != "1" else ""
            reason = f"gave up after {restarts} restart{plural} ({result})"
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
            queued=queued,
        )

    def status(self, names: Sequence[str]) -> Mapping[str, InitStatus]:
        """As the base class has it; a start job still queued says what it waits for."""
        found = super().status(names)
        if not any(s.queued for s in found.values()):
            return found
        jobs = self._jobs()
        return {
            name: recordclass.evolve(s, reason=s.reason + _behind(jobs, name)) if s.queued else s
            for name, s in found.items()
        }

    def settled(self, name: str, timeout: float = QUEUE_BOUND) -> InitStatus:
        """The state once the start job has left systemd's queue (bounded by ``timeout``).

        Right after ``start --no-block`` the job may still wait behind the unit's ``After=``
        units, and ``ActiveState`` says ``inactive`` for a service about to start: reading it
        then would report a failure that is not one. Past the bound the start is reported
        under way (systemd runs it when its turn comes), with the jobs ahead of it. The polls
        thin out (20 ms to 0.5 s): every ``systemctl`` call is a request to PID 1, whose
        queue of jobs runs only when it has no request to answer.
        """
        deadline = self.clock.monotonic() + timeout
        pause = 0.02
        while (status := self.query(name)).queued:
            if self.clock.monotonic() >= deadline:
                waiting = _behind(self._jobs(), name)
                return recordclass.evolve(
                    status, reason=f"start job still queued after {timeout:g}s{waiting}"
                )
            self.clock.sleep(pause)
            pause = min(pause * 1.5, 0.5)
        return status

    def _jobs(self) -> dict[str, _Job]:
        """systemd's job queue: each job by id, with the ids of the jobs it waits for."""
        listing = self.run(
            "systemctl", "list-jobs", "--after", "--before", "--no-legend", "--plain", check=False
        )
        return _parse_jobs(listing.stdout)

    def record_milestone(self, service: Service) -> None:
        """Write the unit of a service without a command (the base class's), then reload when
        systemd holds an older version of it, or cannot load it (see :meth:`launch`).

        Dependents name it in ``Requires=`` (k3s needs ``k3s-cluster``, the alias of
        ``k3s-cluster-init``): without its unit systemd refuses their start with "Unit
        k3s-cluster.service not found". Starting it is left to systemd, which pulls it in
        through those ``Requires=`` lines.
        """
        super().record_milestone(service)
        self._reload_if_stale(f"{service.name}.service", time.monotonic())

    def removed(self, paths: Sequence[str]) -> None:
        """``daemon-reload`` (:func:`reload_after_removal`): systemd forgets the removed units."""
        reload_after_removal(self.root, paths)

    def launch(self, name: str, verb: str) -> None:
        """``systemctl start|restart --no-block``: a blocking start from a unit ordered
        ``Before=`` the service would deadlock the boot.

        ``daemon-reload`` only where it is needed: each one reads every unit again (5 s with
        200 units here, so one per start made an apply quadratic). A unit systemd holds that
        changed on disk says ``NeedDaemonReload=yes``; a new one systemd loads when it is
        started (since systemd 246); one it still cannot load (``LoadState`` ``not-found`` or
        ``error`` after the write, or "not found" from the start) gets a reload (and, after
        that start, a second try). Threads starting at once share one reload. A unit systemd
        gave up on (``failed``) is reset first: its start limit would refuse the start."""
        unit = f"{name}.service"
        written = time.monotonic()  # the unit was written before this call
        stale = self._stale.pop(name, None)  # read by the query a start makes after writing
        if stale is None:
            self._reload_if_stale(unit, written)
        elif stale:
            self._reload(written)
        if self._failed.pop(name, False):
            # systemd gave up on it (StartLimitBurst, counted over the unit's whole life when
            # no respawn_period is set) and refuses every later start until reset: an apply
            # asks for a fresh start, as the native supervisor and OpenRC give one.
            self.run("systemctl", "reset-failed", unit, check=False)
        done = self.run("systemctl", verb, "--no-block", unit, check=False)
        if done.returncode != 0 and ("not found" in done.stderr or "load properly" in done.stderr):
            # this unit, or one it needs ("Unit X failed to load properly ... reload"), is one
            # systemd has not read since it was written
            self._reload(written)
            self.run("systemctl", verb, "--no-block", unit)
        elif done.returncode != 0:
            raise failure(done)

    def _reload_if_stale(self, unit: str, written: float) -> None:
        """``daemon-reload`` when systemd holds an older version of ``unit`` than the disk, or
        cannot load the one written (:func:`_stale`)."""
        out = self.run(
            "systemctl", "show", "-p", "NeedDaemonReload,LoadState", unit, check=False
        ).stdout
        if _stale(dict(line.split("=", 1) for line in out.splitlines() if "=" in line)):
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

    def stop(self, names: Sequence[str]) -> list[InitStatus]:
        """Stop in order, then ``systemctl reset-failed`` the lot: a unit systemd gave up on
        stays ``failed`` through a stop (and, once ``reset`` removes it, ``not-found failed``),
        keeping the machine ``degraded``; stopped means stopped, as under the native
        supervisor. One call for all: it goes on past a unit that is not failed."""
        for name in names:
            self.halt(name)
        if names:
            self.run("systemctl", "reset-failed", *(f"{n}.service" for n in names), check=False)
        return list(self.status(names).values())
