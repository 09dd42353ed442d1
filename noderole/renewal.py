"""Certificates renewed while the node runs: ``noderole renew``, ``cert check --role`` and the
schedules that run renew without a reboot.

:func:`renew` looks at every *running* service of a role that mints a certificate
(:class:`~noderole.records.MintCertificate`) and asks, without writing anything, whether its
certificate would be re-minted now: inside its renewal window, issued by a CA that changed, or for
SANs (or a common name) that changed. Only those services go through the engine again (their
pre-start steps re-mint; the new certificate changes their fingerprint, so the backend restarts
them, each with its reason). Everything else is left exactly as it is.

Schedules:

- native backend: the built-in plugin adds :func:`renew_service`, ``noderole-renew``, a service
  the supervisor keeps running like any other: a ``/bin/sh`` loop that runs ``noderole renew``
  every ``renew_interval`` seconds, first after a per-node offset within ``renew_jitter``. The
  supervisor stays a plain supervisor (no timers of its own), the loop shows in ``status``, and
  ``sh`` + ``sleep`` cost about 1 MB where a resident Python process would cost 20.
- OpenRC and systemd: :func:`periodic_files`, a job the distribution runs
  (``/etc/periodic/daily/noderole-renew``) or a ``noderole-renew.timer``; ``render`` writes them
  and ``enable`` installs them.

The offset is derived from the node's machine id, so it is stable (a re-apply does not restart
the loop) yet differs between nodes: servers whose certificates were minted together do not all
restart konnectivity-server, dropping every agent's tunnels, in the same minute.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from noderole.records import MintCertificate, Service
from noderole.root import NodeRoot

if TYPE_CHECKING:
    from noderole.backends import Backend
    from noderole.context import NodeContext
    from noderole.engine import ApplyReport, Progress
    from noderole.operations import Operations
    from noderole.plan import Plan
    from noderole.render import Rendered

__all__ = [
    "OPENRC_PERIODIC",
    "RENEW_SERVICE",
    "SYSTEMD_SERVICE",
    "SYSTEMD_TIMER",
    "CertificateCheck",
    "check_certificates",
    "jitter_offset",
    "periodic_files",
    "renew",
    "renew_service",
    "role_certificates",
]

RENEW_SERVICE = "noderole-renew"
"""The built-in service that runs ``noderole renew`` on an interval (native backend)."""
RENEW_LOG = "/var/log/noderole-renew.log"
OPENRC_PERIODIC = "/etc/periodic/daily/noderole-renew"
"""Alpine's crond runs ``run-parts /etc/periodic/daily`` once a day."""
SYSTEMD_SERVICE = "/etc/systemd/system/noderole-renew.service"
SYSTEMD_TIMER = "/etc/systemd/system/noderole-renew.timer"
_UP = ("starting", "running", "ready")


# --------------------------------------------------------------------------- checking


@attrs.frozen(kw_only=True)
class CertificateCheck:
    """One certificate a service mints, as it is on the node now."""

    service: str
    """The service whose pre-start step mints it."""
    path: str
    """Node path of the certificate."""
    due: bool
    """True when the step would re-mint it now (or it cannot be checked: see ``error``)."""
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
    """Set when the CA cannot be used: the certificate cannot be checked or renewed."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        data = attrs.asdict(self)
        data["sans"] = list(self.sans)
        data["not_after"] = self.not_after.isoformat() if self.not_after else None
        return data


def _now(ops: Operations) -> dt.datetime:
    return dt.datetime.fromtimestamp(ops.clock.time(), tz=dt.UTC)


def check_certificates(
    service: Service, *, root: NodeRoot, now: dt.datetime
) -> list[CertificateCheck]:
    """The certificates ``service``'s steps mint, each with the verdict its step would reach now.

    Reads only: the same rules as minting (:func:`noderole.certs.reuse_verdict`), against the CA,
    common name and SANs the service asks for today.
    """
    from noderole.certs import inspect_certificate, step_verdict
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
                "issuer": report.issuer,
                "sans": report.sans,
                "not_after": report.not_after,
                "days_left": report.days_left,
            }
        except CertificateError:
            pass  # missing or unreadable: the verdict below says so
        try:
            reuse, reason = step_verdict(step, root=root, now=now)
        except CertificateError as error:
            checks.append(CertificateCheck(**base, **shown, due=True, reason="", error=str(error)))
            continue
        checks.append(CertificateCheck(**base, **shown, due=not reuse, reason=reason))
    return checks


def role_certificates(ops: Operations, role: str) -> list[CertificateCheck]:
    """Every certificate the services of ``role`` mint (running or not), in plan order."""
    plan = ops.plan(role)
    now = _now(ops)
    return [
        check
        for entry in plan.services
        for check in check_certificates(entry.service, root=ops.root, now=now)
    ]


# --------------------------------------------------------------------------- renewing


def _mints(service: Service) -> bool:
    return service.command is not None and any(
        isinstance(step, MintCertificate) for step in service.pre_start
    )


def renew(
    ops: Operations,
    plan: Plan,
    backend: Backend,
    *,
    progress: Progress | None = None,
    lock_timeout: float = 300.0,
) -> ApplyReport:
    """Re-mint the due certificates of ``plan``'s running services and restart only those.

    Under the node lock. The report has one entry per running service that mints a certificate:
    ``restarted`` (or ``failed``) with the engine's reason for the renewed ones, ``running`` with
    each certificate's validity for the others. Stopped services are not touched (``apply``
    starts them).
    """
    from noderole.console import QuietProgress
    from noderole.engine import ApplyReport, ServiceReport, apply_plan
    from noderole.state import node_lock, read_applied, write_applied

    started = ops.clock.monotonic()
    reports: dict[str, ServiceReport] = {}
    with node_lock(ops.root, timeout=lock_timeout, clock=ops.clock, what=f"renew {plan.role}"):
        candidates = [e.name for e in plan.services if _mints(e.service)]
        current = backend.status(candidates)
        now = _now(ops)
        due: list[str] = []
        for name in candidates:
            status = current.get(name)
            if status is None or status.state not in _UP:
                continue
            checks = check_certificates(plan[name].service, root=ops.root, now=now)
            errors = [f"{c.path}: {c.error}" for c in checks if c.error]
            if errors:
                reports[name] = ServiceReport(
                    name=name,
                    status="failed",
                    reason=f"cannot renew: {'; '.join(errors)}",
                    pid=status.pid,
                )
            elif any(c.due for c in checks):
                due.append(name)
            else:
                good = "; ".join(f"{c.path} {c.reason}" for c in checks)
                reports[name] = ServiceReport(
                    name=name, status="running", reason=f"certificate good: {good}", pid=status.pid
                )
        if due:
            previous = read_applied(ops.root)
            recorded: dict[str, dict[str, str]] = {}
            renewed = apply_plan(
                plan.subset(due),
                root=ops.root,
                clock=ops.clock,
                backend=backend,
                progress=progress if progress is not None else QuietProgress(),
                readiness_timeout=float(ops.setting("readiness_timeout")),
                previous=previous,
                on_digests=recorded.update,
            )
            write_applied(ops.root, {**previous, **recorded})
            reports.update({r.name: r for r in renewed.services})
    return ApplyReport(
        role=plan.role,
        backend=backend.name,
        services=tuple(reports[e.name] for e in plan.services if e.name in reports),
        seconds=ops.clock.monotonic() - started,
    )


# --------------------------------------------------------------------------- schedules


def jitter_offset(root: NodeRoot, jitter: float) -> int:
    """Whole seconds in ``[0, jitter)``, the same on every call on one node, different between
    nodes (from ``/etc/machine-id``, else the host name)."""
    if jitter < 1:
        return 0
    try:
        seed = root.resolve("/etc/machine-id").read_text().strip()
    except OSError:
        seed = ""
    seed = seed or socket.gethostname()
    number = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    return number % int(jitter)


def _native(node: NodeContext, backend: str) -> bool:
    """Whether the services of this node run under the native supervisor.

    ``auto`` counts only on a real root: under ``--root`` (rehearsals, image builds) the loop
    would run against a scratch directory; set ``backend = "native"`` to have it there.
    """
    if backend == "native":
        return True
    if backend != "auto" or not node.root.is_real:
        return False
    from noderole.backends.detect import detect_init

    return detect_init(node.root) == "native"


def renew_service(node: NodeContext, settings: Any) -> Service | None:
    """The ``noderole-renew`` service for ``node.role`` (None when renewal is off, no role is in
    question, or the node's backend is not native: OpenRC and systemd run
    :func:`periodic_files`)."""
    interval = float(settings["renew_interval"])
    if interval <= 0 or node.role is None or not _native(node, str(settings["backend"])):
        return None
    offset = jitter_offset(node.root, float(settings["renew_jitter"]))
    loop = 'sleep "$1"; while :; do "$3" renew --backend native; sleep "$2"; done'
    return Service(
        name=RENEW_SERVICE,
        description="Renew serving certificates while the node runs (noderole renew)",
        roles=[node.role],
        command=[
            "/bin/sh",
            "-c",
            loop,
            RENEW_SERVICE,
            str(offset),
            f"{interval:g}",
            str(settings["noderole_path"]),
        ],
        output_log=RENEW_LOG,
        error_log=RENEW_LOG,
    )


def periodic_files(
    backend: str, *, noderole_path: str, jitter: float = 3600.0, root: NodeRoot | None = None
) -> list[Rendered]:
    """The files that run ``noderole renew`` daily under ``backend`` (``openrc``: the periodic job
    Alpine's crond runs; ``systemd``: ``noderole-renew.service`` and ``.timer``, enabled through
    ``timers.target``). ``render`` writes them; ``enable`` installs them. Empty for ``native``
    (its schedule is the ``noderole-renew`` service)."""
    from noderole.errors import UsageError
    from noderole.render import RenderedFile, RenderedLink
    from noderole.render._quote import sh_quote, systemd_command_line

    if backend == "native":
        return []
    if backend == "openrc":
        offset = jitter_offset(root or NodeRoot("/"), jitter)
        # In the background: run-parts runs the daily jobs one after another, and the node's
        # offset (up to the jitter) must not hold the others back.
        script = f"""\
#!/bin/sh
# Written by noderole (noderole reset removes it). Re-mints serving certificates inside their
# renewal window and restarts only the services that read them.
( sleep {offset}; exec {sh_quote(noderole_path)} renew --backend openrc ) \\
    >>{RENEW_LOG} 2>&1 </dev/null &
"""
        return [RenderedFile(path=OPENRC_PERIODIC, content=script, mode=0o755)]
    if backend == "systemd":
        unit = f"""\
# Written by noderole (noderole reset removes it); started by noderole-renew.timer.
[Unit]
Description=Renew noderole's serving certificates (noderole renew)
After=network-online.target

[Service]
Type=oneshot
ExecStart={systemd_command_line([noderole_path, "renew", "--backend", "systemd"])}
"""
        timer = f"""\
# Written by noderole (noderole reset removes it).
[Unit]
Description=Renew noderole's serving certificates daily

[Timer]
OnCalendar=daily
RandomizedDelaySec={int(jitter)}
Persistent=true

[Install]
WantedBy=timers.target
"""
        return [
            RenderedFile(path=SYSTEMD_SERVICE, content=unit, mode=0o644),
            RenderedFile(path=SYSTEMD_TIMER, content=timer, mode=0o644),
            RenderedLink(
                path="/etc/systemd/system/timers.target.wants/noderole-renew.timer",
                target="../noderole-renew.timer",
            ),
        ]
    raise UsageError(f"no periodic renewal for backend {backend!r}: use openrc or systemd")


def due_services(checks: Sequence[CertificateCheck]) -> list[str]:
    """Names of the services with a certificate due (for reports)."""
    return list(dict.fromkeys(c.service for c in checks if c.due))
