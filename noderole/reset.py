"""``noderole reset``: undo what apply, render and enable did to a node (``kubeadm reset``'s idea).

The role's services are stopped (and the native supervisor shut down), then every path
:mod:`noderole.manifest` recorded is removed, unless it changed since noderole wrote it; minted
certificates and keys, service logs and the directories steps created stay unless ``purge``.
Nothing noderole did not record is ever touched, so a file planted beside noderole's survives. A
second reset finds nothing recorded and does nothing.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from noderole import recordclass
from noderole.manifest import Removal, apply_reset, plan_reset

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from noderole.backends import Backend
    from noderole.clock import Clock
    from noderole.plan import Plan
    from noderole.root import NodeRoot

__all__ = ["ResetReport", "reset"]


@recordclass.frozen(kw_only=True)
class ResetReport:
    """What a reset did (or, with ``dry_run``, would do)."""

    role: str | None
    """The role whose services were stopped (None: no role given or recorded)."""
    stopped: tuple[str, ...]
    """Services stopped (or to stop), in stop order."""
    removals: tuple[Removal, ...]
    """Every recorded path and what happens to it."""
    removed: tuple[str, ...]
    """Node paths removed (empty for a dry run)."""
    dry_run: bool
    """Nothing was changed."""

    @property
    def to_remove(self) -> list[str]:
        """Node paths removed, or for a dry run those that would be."""
        return [r.path for r in self.removals if r.action == "remove"]

    @property
    def kept(self) -> list[Removal]:
        """Recorded paths left in place, each with its reason."""
        return [r for r in self.removals if r.action == "keep"]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``reset --json``)."""
        return {
            "role": self.role,
            "dry_run": self.dry_run,
            "stopped": list(self.stopped),
            "removed": list(self.removed) if not self.dry_run else self.to_remove,
            "kept": [{"path": r.path, "reason": r.reason} for r in self.kept],
        }


def reset(
    role: str | None,
    backend: Backend | None,
    *,
    purge: bool = False,
    root: NodeRoot,
    clock: Clock,
    plan_for: Callable[[str], Plan],
    dry_run: bool = False,
    lock_timeout: float = 300.0,
) -> ResetReport:
    """Stop ``role`` (default: the recorded one) through ``backend`` and remove what noderole
    wrote. With ``dry_run`` nothing changes and the report lists what would (the services that
    would be stopped: those ``backend``, when given, finds running). ``plan_for`` plans
    a role (a :class:`~noderole.errors.PlanError` when no plugin knows it any more)."""
    from noderole.errors import PlanError
    from noderole.paths import LOCK_FILE, RUN_DIR
    from noderole.recorded import applied_role
    from noderole.state import node_lock, read_role

    # What runs is the role last applied; the role file may already name the next (enable).
    chosen = role or applied_role(root) or read_role(root)
    stopping: list[str] = []
    processes: list[str] | None = None  # of stopping, those with a process (None: all)
    if chosen is not None:
        try:
            plan = plan_for(chosen)
        except PlanError:
            if role:
                raise
            # The recorded role's plugin is gone (the node is being repurposed): nothing names
            # its services any more; the native supervisor's shutdown below still ends them.
            plan = None
        if plan is not None:
            stopping = [n for n in plan.stop_order() if plan[n].service.command is not None]
            milestones = getattr(backend, "milestones", None)
            if milestones is not None:
                # An init system's milestone units too: one still active when its file goes
                # stays loaded as "not-found active", and the next apply's start of what
                # needs it fails until systemd is reloaded by hand.
                held = set(milestones([plan[n].service for n in plan.stop_order()]))
                order = plan.stop_order()
                stopping = [n for n in order if n in held or plan[n].service.command is not None]
                processes = [n for n in stopping if n not in held]
    lock = root.resolve(LOCK_FILE)
    had_lock = lock.exists()
    removals = _planned(root, purge=purge, had_lock=had_lock)
    reported = stopping if processes is None else processes
    if dry_run and reported and backend is not None:
        # What the reset would report (asking changes nothing: the native backend answers from
        # its state file when no daemon runs).
        reported = _running(backend, reported)
    if dry_run or not (stopping or any(r.action != "keep" for r in removals)):
        return ResetReport(
            role=chosen,
            stopped=tuple(reported) if dry_run else (),
            removals=tuple(removals),
            removed=(),
            dry_run=dry_run,
        )
    stopped: list[str] = []
    with node_lock(root, timeout=lock_timeout, clock=clock, what="reset"):
        if stopping and backend is not None:
            running = _running(backend, reported)
            if plan is not None:
                from noderole.backends import stop_in_waves

                stop_in_waves(backend, stopping, plan.stop_waves(stopping))
            else:
                backend.stop(stopping)
            # As `stop` reports: only what had a process; a second reset stopped nothing.
            stopped = running
        supervisor = getattr(backend, "supervisor", None)
        if supervisor is not None:  # the native backend: its daemon goes with the role
            supervisor.shutdown()
        removals = _planned(root, purge=purge, had_lock=had_lock)  # after the stop's writes
        removed, removals = apply_reset(root, removals)
        from noderole.backends.systemd import reload_after_removal

        # systemd keeps removed units loaded until told; OpenRC rereads /etc/init.d by itself.
        reload_after_removal(root, removed)
    if not had_lock:  # the lock this reset made for itself goes too
        lock.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: something else still lives there
        os.rmdir(root.resolve(RUN_DIR))
    return ResetReport(
        role=chosen,
        stopped=tuple(stopped),
        removals=tuple(removals),
        removed=tuple(removed),
        dry_run=False,
    )


def _running(backend: Backend, names: Sequence[str]) -> list[str]:
    """Those of ``names`` that ``backend`` finds with a process: what a reset reports stopped
    (and its dry run, that it would stop)."""
    from noderole.supervisor._status import ACTIVE

    now = backend.status(names)
    return [n for n in names if n in now and now[n].state in ACTIVE]


def _planned(root: NodeRoot, *, purge: bool, had_lock: bool) -> list[Removal]:
    """:func:`plan_reset`'s answer, plus the node lock when one was there before the reset.

    The lock is noderole's whatever wrote it: an apply records it, but a renew or stop on a
    node never applied leaves one no manifest lists. The dry run names it as the reset removes
    it, before the directory it is in.
    """
    from noderole.paths import LOCK_FILE

    removals = plan_reset(root, purge=purge)
    if had_lock and not any(r.path == LOCK_FILE for r in removals):
        own = [i for i, r in enumerate(removals) if r.kind == "own"]
        at = own[0] if own else len(removals)
        removals.insert(at, Removal(path=LOCK_FILE, kind="runtime", action="remove"))
    return removals
