"""Certificates renewed while the node runs: ``noderole renew`` and ``cert check --role``.

:func:`renew` looks at every *running* service of a role that mints a certificate
(:class:`~noderole.records.MintCertificate`) and asks, without writing anything, whether its
certificate would be re-minted now: inside its renewal window, issued by a CA that changed, or for
SANs (or a common name) that changed. Only those services go through the engine again (their
pre-start steps re-mint; the new certificate changes their fingerprint, so the backend restarts
them, each with its reason). Everything else is left exactly as it is.

The schedules that run it without a reboot are :mod:`noderole.schedule`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from noderole import recordclass
from noderole.records import MintCertificate, Service
from noderole.root import NodeRoot

if TYPE_CHECKING:
    from noderole.backends import Backend
    from noderole.clock import Clock
    from noderole.engine import ApplyReport, Progress
    from noderole.plan import Plan

__all__ = ["CertificateCheck", "check_certificates", "renew", "role_certificates"]

_UP = ("starting", "running", "ready")


# --------------------------------------------------------------------------- checking


@recordclass.frozen(kw_only=True)
class CertificateCheck:
    """One certificate a service mints, as it is on the node now."""

    service: str
    """The service whose pre-start step mints it."""
    path: str
    """Node path of the certificate."""
    due: bool
    """True when the step would re-mint it now (or it cannot be checked or renewed: see
    ``error``)."""
    reason: str
    """Why it is due, or why it is good (``valid until ... (300 days left)``)."""
    issuer: str | None = None
    """Issuer CN of the certificate on disk (None: no certificate)."""
    sans: tuple[str, ...] = ()
    """Its subject alternative names."""
    not_after: dt.datetime | None = None
    """End of its validity."""
    days_left: int | None = None
    """Whole days left (negative once expired)."""
    renew_before_days: int = 90
    """The step's renewal window."""
    error: str = ""
    """Set when the certificate cannot be checked or renewed: the CA cannot be used, the pair
    cannot be read, or inside its renewal window it expires with its CA (rotate the CA)."""
    fingerprint: str | None = None
    """SHA-256 fingerprint of the certificate on disk (None: none, or unreadable)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        data = recordclass.asdict(self)
        data["sans"] = list(self.sans)
        data["not_after"] = self.not_after.isoformat() if self.not_after else None
        return data


def _now(clock: Clock) -> dt.datetime:
    return dt.datetime.fromtimestamp(clock.time(), tz=dt.UTC)


def check_certificates(
    service: Service, *, root: NodeRoot, now: dt.datetime
) -> list[CertificateCheck]:
    """The certificates ``service``'s steps mint, each with the verdict its step would reach now.

    Reads only: the same rules as minting (:func:`noderole.certs.judge_step`), against the CA,
    common name and SANs the service asks for today.
    """
    from noderole.certs import inspect_certificate, judge_step
    from noderole.errors import CertificateError

    checks = []
    for step in service.pre_start:
        if not isinstance(step, MintCertificate):
            continue
        base: dict[str, Any] = {
            "service": service.name,
            "path": step.cert_path,
            "renew_before_days": step.renew_before_days,
        }
        cert_file = root.resolve(step.cert_path)
        shown: dict[str, Any] = {}
        try:
            report = inspect_certificate(cert_file, ca_cert=None, now=now)
            shown = {
                "fingerprint": report.fingerprint,
                "issuer": report.issuer,
                "sans": report.sans,
                "not_after": report.not_after,
                "days_left": report.days_left,
            }
        except CertificateError:
            pass  # missing or unreadable: the verdict below says so
        try:
            verdict = judge_step(step, root=root, now=now)
        except CertificateError as error:
            checks.append(CertificateCheck(**base, **shown, due=True, reason="", error=str(error)))
            continue
        if verdict.warning:
            # Kept by the step, but no renewal can help: an error for whoever watches renewals,
            # naming the CA and its rotation, before every client refuses the chain.
            checks.append(
                CertificateCheck(
                    **base, **shown, due=True, reason=verdict.reason, error=verdict.warning
                )
            )
            continue
        checks.append(
            CertificateCheck(**base, **shown, due=not verdict.reuse, reason=verdict.reason)
        )
    return checks


def role_certificates(plan: Plan, *, root: NodeRoot, clock: Clock) -> list[CertificateCheck]:
    """Every certificate the services of ``plan``'s role mint (running or not), in plan order;
    a service whose pre-start fails today (:func:`failing`) is one check with that error: what
    it would mint cannot be known, nor renewed."""
    now = _now(clock)
    checks = []
    for entry in plan.services:
        message = failing(entry.service)
        if message:
            checks.append(
                CertificateCheck(service=entry.name, path="-", due=True, reason="", error=message)
            )
        else:
            checks.extend(check_certificates(entry.service, root=root, now=now))
    return checks


def failing(service: Service) -> str:
    """Why ``service``'s pre-start ends in failure whatever the node holds, or "": a plugin
    that cannot define it from today's inputs (konnectivity without its first-boot file) ends
    its steps with a :class:`~noderole.records.Fail` in place of the rest, its certificate's
    included. A failing step followed by others (node-exporter checks its port first and keeps
    its steps) is no sign of a certificate left out; nor is a milestone's, which mints nothing."""
    from noderole.records import Fail

    if service.command is None or not service.pre_start:
        return ""
    last = service.pre_start[-1]
    return f"its pre-start fails: {last.message}" if isinstance(last, Fail) else ""


# --------------------------------------------------------------------------- renewing


def _started_before_a_new_pair(
    name: str,
    checks: list[CertificateCheck],
    running: str,
    applied: dict[str, dict[str, Any]],
) -> bool:
    """True when the process runs with other certificates than those on disk now, its
    definition being the one the last apply recorded: a renew stopped between its re-mint and
    its restart (a timeout's SIGTERM, an OOM kill), a pair replaced by hand. Nothing is due any
    more; without this, renew would call the old pair "good" every day until it expired."""
    from noderole.engine import SHOWN_KEY, fingerprint_base, process_fingerprint

    recorded = {k: v for k, v in applied.get(name, {}).items() if k != SHOWN_KEY}
    found = [c.fingerprint for c in checks]
    if not running or not recorded or any(f is None for f in found):
        return False
    now = process_fingerprint(recorded, [f for f in found if f is not None])
    return fingerprint_base(running) != fingerprint_base(now)


def _mints(service: Service) -> bool:
    """A service renew looks at: one that mints a certificate, or one that cannot be defined
    today (what it minted before is then out of reach: renew fails it, saying why)."""
    return service.command is not None and (
        any(isinstance(step, MintCertificate) for step in service.pre_start)
        or bool(failing(service))
    )


def renew(
    plan: Plan,
    backend: Backend,
    *,
    root: NodeRoot,
    clock: Clock,
    readiness_timeout: float,
    progress: Progress | None = None,
    lock_timeout: float = 300.0,
) -> ApplyReport:
    """Re-mint the due certificates of ``plan``'s running services and restart only those.

    Under the node lock. The report has one entry per running service that mints a certificate:
    ``restarted`` (or ``failed``) with the engine's reason for the renewed ones, ``running`` with
    each certificate's validity for the others. Stopped services are not touched (``apply``
    starts them). ``readiness_timeout`` bounds the wait for a restarted service (``[noderole]
    readiness_timeout``).
    """
    from noderole.console import QuietProgress
    from noderole.engine import ApplyReport, ServiceReport, apply_plan
    from noderole.state import node_lock, read_applied, write_applied

    started = clock.monotonic()
    reports: dict[str, ServiceReport] = {}
    with node_lock(root, timeout=lock_timeout, clock=clock, what=f"renew {plan.role}"):
        candidates = [e.name for e in plan.services if _mints(e.service)]
        current = backend.status(candidates)
        applied = read_applied(root)
        now = _now(clock)
        due: list[str] = []
        for name in candidates:
            status = current.get(name)
            if status is None or status.state not in _UP:
                continue
            broken = failing(plan[name].service)
            if broken:
                reports[name] = ServiceReport(
                    name=name, status="failed", reason=f"cannot renew: {broken}", pid=status.pid
                )
                continue
            checks = check_certificates(plan[name].service, root=root, now=now)
            errors = [f"{c.path}: {c.error}" for c in checks if c.error]
            if errors:
                reports[name] = ServiceReport(
                    name=name,
                    status="failed",
                    reason=f"cannot renew: {'; '.join(errors)}",
                    pid=status.pid,
                )
            elif any(c.due for c in checks) or _started_before_a_new_pair(
                name, checks, status.fingerprint, applied
            ):
                due.append(name)
            else:
                good = "; ".join(f"{c.path} {c.reason}" for c in checks)
                reports[name] = ServiceReport(
                    name=name, status="running", reason=f"certificate good: {good}", pid=status.pid
                )
        if due:
            previous = read_applied(root)
            recorded: dict[str, dict[str, str]] = {}
            renewed = apply_plan(
                plan.subset(due),
                root=root,
                clock=clock,
                backend=backend,
                progress=progress if progress is not None else QuietProgress(),
                readiness_timeout=readiness_timeout,
                previous=previous,
                on_digests=recorded.update,
            )
            write_applied(root, {**previous, **recorded})
            reports.update({r.name: r for r in renewed.services})
    return ApplyReport(
        role=plan.role,
        backend=backend.name,
        services=tuple(reports[e.name] for e in plan.services if e.name in reports),
        seconds=clock.monotonic() - started,
    )


def due_services(checks: Sequence[CertificateCheck]) -> list[str]:
    """Names of the services with a certificate due (for reports)."""
    return list(dict.fromkeys(c.service for c in checks if c.due))
