"""``apply --dry-run``: the plan with the node's current state, changing nothing.

For each service: would it start, restart (and why), or be left running; and for each
certificate step, would the pair be reused or minted (and why). Nothing is waited for, written
or started.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from noderole.errors import NoderoleError
from noderole.records import (
    Fail,
    MakeDirectories,
    MintCertificate,
    Service,
    WaitForPaths,
    WriteFile,
)

if TYPE_CHECKING:
    from noderole.backends import Backend
    from noderole.clock import Clock
    from noderole.plan import Plan
    from noderole.root import NodeRoot

__all__ = ["certificate_verdict", "dry_run_report", "known_failures", "short", "summary"]


def short(reason: str, width: int = 60) -> str:
    """``reason`` cut to ``width`` characters with ``...`` (the full text is in the rows)."""
    return reason if len(reason) <= width else reason[: width - 4].rstrip() + " ..."


def known_failures(plan: Plan, root: NodeRoot | None = None) -> dict[str, str]:
    """Service -> why it would fail or be skipped, for reasons known before anything runs: a
    ``Fail`` step; with ``root``, a wait for a path that is missing while nothing in the role
    could produce it (no step of the role writes it, and nothing the service starts after runs a
    process); or a ``need`` of such a service."""
    verdicts: dict[str, str] = {}
    produced = _produced_paths(plan)
    for entry in plan.services:  # start order: what a service needs is judged first
        why = _step_failure(plan, entry.name, root, produced)
        if why is not None:
            verdicts[entry.name] = f"fail: {why}"
            continue
        needed = next((d for d in entry.needs if d in verdicts), None)
        if needed is not None:
            verdicts[entry.name] = f"skip: it needs {needed}, which would not start"
    return verdicts


def _produced_paths(plan: Plan) -> set[str]:
    paths: set[str] = set()
    for entry in plan.services:
        for step in entry.service.pre_start:
            if isinstance(step, WriteFile):
                paths.add(step.path)
            elif isinstance(step, MintCertificate):
                paths.update((step.cert_path, step.key_path))
            elif isinstance(step, MakeDirectories):
                paths.update(step.paths)
    return paths


def _upstream_runs_a_process(plan: Plan, name: str) -> bool:
    """True when something ``name`` starts after (transitively) runs a process."""
    seen: set[str] = set()
    todo = list(plan[name].after)
    while todo:
        other = todo.pop()
        if other in seen or other not in plan:
            continue
        seen.add(other)
        if plan[other].service.command is not None:
            return True
        todo.extend(plan[other].after)
    return False


def _step_failure(plan: Plan, name: str, root: NodeRoot | None, produced: set[str]) -> str | None:
    """The first pre-start step of ``name`` that is bound to fail, judged now; None if none."""
    for step in plan[name].service.pre_start:
        if isinstance(step, Fail):
            return step.message
        if isinstance(step, WaitForPaths) and root is not None:
            missing = [
                p for p in step.paths if p not in produced and not os.path.exists(root.local(p))
            ]
            if missing and not _upstream_runs_a_process(plan, name):
                return (
                    f"waits up to {step.timeout:g}s for {', '.join(missing)}, which "
                    f"{'is' if len(missing) == 1 else 'are'} missing and nothing in role "
                    f"{plan.role} produces"
                )
    return None


def summary(rows: list[dict[str, Any]], backend: str) -> str:
    """``5 services: 3 would start, 1 would fail (name: reason), 1 skipped (backend native)``."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["action"]] = counts.get(row["action"], 0) + 1
    words = {
        "start": "would start",
        "restart": "would restart",
        "keep": "left running",
        "check": "checks only",
        "fail": "would fail",
        "skip": "skipped",
    }
    parts = []
    for action, word in words.items():
        if counts.get(action):
            part = f"{counts[action]} {word}"
            if action == "fail":
                failing = [f"{r['name']}: {short(r['why'])}" for r in rows if r["action"] == "fail"]
                part += f" ({'; '.join(failing)})"
            parts.append(part)
    return f"{len(rows)} services: {', '.join(parts) or 'nothing to do'} (backend {backend})"


def certificate_verdict(step: MintCertificate, *, root: NodeRoot, clock: Clock) -> str:
    """``reuse: ...`` or ``mint: reason`` for a certificate step, without writing anything."""
    import datetime as dt

    from noderole.certs import CLOCK_WAIT, CANotYetValid, step_verdict

    ca_cert, ca_key = root.resolve(step.ca_cert), root.resolve(step.ca_key)
    if not (ca_cert.exists() and ca_key.exists()):
        return f"mint once {step.ca_cert} appears"
    now = dt.datetime.fromtimestamp(clock.time(), dt.UTC)
    try:
        reuse, reason = step_verdict(step, root=root, now=now)
    except CANotYetValid as exc:  # the step would wait for the clock; a dry run never does
        return f"would wait up to {CLOCK_WAIT:g}s for this node's clock: {exc}"
    except NoderoleError as exc:
        return f"would fail: {exc}"
    return f"reuse: {reason}" if reuse else f"mint: {reason}"


def dry_run_report(
    plan: Plan, backend: Backend, *, root: NodeRoot, clock: Clock
) -> list[dict[str, Any]]:
    """One row per planned service: ``name``, ``action``, ``why``, ``certificates``.

    A running service is judged as ``apply`` judges it (:func:`~noderole.engine.compare_running`):
    by the fingerprint its process was started with against the one it would be started with
    now (its definition, and the certificates its steps would leave in place), then by the
    files it read; what the last apply recorded only words the reason."""
    # Imported here: `plan` uses this module's known_failures, and must not pay for the engine.
    from noderole.backends import status_to_act_on
    from noderole.engine import (
        compare_running,
        definition_digests,
        file_writers,
        files_read,
        has_process,
        process_fingerprint,
        restart_reasons,
    )
    from noderole.state import read_applied

    # As apply asks (a native supervisor that does not answer fails it, exit 10): what would
    # be kept or started is judged on what the supervisor itself says.
    current = status_to_act_on(
        backend, [e.name for e in plan.services if e.service.command is not None]
    )
    previous = read_applied(root)
    actions: dict[str, str] = {}  # name -> action, for what needs it
    rows = []
    failures = known_failures(plan, root)
    for entry in plan.services:
        service = entry.service
        steps = [step for step in service.pre_start if isinstance(step, MintCertificate)]
        certificates = [
            {"path": step.cert_path, "verdict": certificate_verdict(step, root=root, clock=clock)}
            for step in steps
        ]
        minting = [c for c in certificates if c["verdict"].startswith("mint:")]
        status = current.get(entry.name)
        running = status is not None and has_process(status)
        if entry.name in failures:
            action, why = failures[entry.name].split(": ", 1)
        elif service.command is None:
            action, why = "check", f"{len(service.pre_start)} steps, no process"
        elif not running or status is None:
            action, why = "start", "not running"
        else:
            digests = definition_digests(service)
            held = [
                _fingerprint_of(step, root) if c["verdict"].startswith("reuse:") else None
                for step, c in zip(steps, certificates, strict=True)
            ]
            files = files_read(plan, entry.name)
            stale: list[str] = []
            if minting:
                same = False
            elif None in held:
                # A certificate that cannot be told now (no CA yet, a step bound to fail): the
                # process is judged by its definition as the last apply recorded it.
                recorded = previous.get(entry.name, {})
                same = all(recorded.get(k, v) == v for k, v in digests.items())
            else:
                fingerprint = process_fingerprint(digests, [h or "" for h in held], files)
                same, stale = compare_running(
                    status,
                    fingerprint,
                    files,
                    (p for w in file_writers(plan, entry.name) for p in _rewrites(w, root)),
                    root=root,
                )
            restarting = [
                name
                for name in entry.needs
                if name in actions
                and actions[name] == "restart"
                and not getattr(backend, "restarts_what_needs", False)
            ]
            if same and not stale and restarting:
                said = " and ".join(restarting)
                action, why = (
                    "restart",
                    f"it needs {said}, which restart{'s' if len(restarting) == 1 else ''} first",
                )
            elif same and not stale:
                action, why = "keep", "running, unchanged"
            else:
                reasons = restart_reasons(
                    service,
                    previous.get(entry.name, {}),
                    digests,
                    minted=[
                        f"certificate {c['path']} would be re-minted ({c['verdict'][6:]})"
                        for c in minting
                    ],
                    certificates=[c["path"] for c in certificates],
                    stale=stale,
                )
                action, why = "restart", "; ".join(reasons) or "definition changed"
        actions[entry.name] = action
        rows.append(
            {"name": entry.name, "action": action, "why": why, "certificates": certificates}
        )
    return rows


def _fingerprint_of(step: MintCertificate, root: NodeRoot) -> str | None:
    """The SHA-256 fingerprint of the certificate ``step`` would keep in place, as ``apply``
    starts the service with it; None when it cannot be read."""
    from noderole.certs import certificate_fingerprint

    try:
        return certificate_fingerprint(root.resolve(step.cert_path))
    except NoderoleError:
        return None


def _rewrites(service: Service, root: NodeRoot) -> list[str]:
    """The paths the service's ``WriteFile`` steps would rewrite: what is there differs, its
    mode included, as the steps themselves judge it (:func:`~noderole.steps.holds`)."""
    from noderole.steps import holds

    paths = []
    for step in service.pre_start:
        if isinstance(step, WriteFile):
            try:
                same = holds(step, root)
            except OSError:
                same = False
            if not same:
                paths.append(step.path)
    return paths
