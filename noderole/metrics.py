"""Fleet metrics: the node's facts in the Prometheus text exposition format.

A fleet reads node-level facts through node_exporter's textfile collector: noderole writes
``noderole.prom`` into the collector's directory (setting ``[noderole] textfile_dir``, off by
default) after every apply, renew, stop and restart, and ``noderole status --format prometheus``
prints the same text. Under the native backend the supervisor daemon is the file's writer while
it runs: the CLI hands it the role-level families (:func:`role_head`) and it appends the service
families after every state change it sees, respawns included, then its heartbeat, rewritten at
least once a minute (:mod:`noderole.supervisor._textfile`). The CLI's own text (the file written
with no daemon running, ``status --format prometheus``) has no heartbeat: it is the daemon's
alone. The names, HELP lines and states are defined once, in
:mod:`noderole.supervisor.exposition`. Series (docs/metrics.md has the alert rules built on them)::

    noderole_apply_success{role}                          gauge  1 when the last apply succeeded
    noderole_apply_duration_seconds{role}                 gauge  how long it took
    noderole_apply_timestamp_seconds{role}                gauge  when it finished (unix time)
    noderole_service_up{role,service}                     gauge  1 running or ready, else 0
    noderole_service_state{service,state}                 gauge  1 for the current state
    noderole_service_restarts_total{service}              counter
    noderole_certificate_expiry_timestamp_seconds{service,path}  gauge
    noderole_supervisor_heartbeat_timestamp_seconds{role}  gauge  native supervisor's last write

The last apply's outcome is kept in ``/var/lib/noderole/last-apply.json`` so ``status`` can
report it later. Only the standard library is imported here; certificate dates are read by the
caller.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from noderole import recordclass
from noderole.root import NodeRoot
from noderole.supervisor.exposition import STATES, TEXTFILE, Exposition, labels, service_families

if TYPE_CHECKING:
    from noderole.plan import Plan

__all__ = [
    "STATES",
    "TEXTFILE",
    "ApplyOutcome",
    "CertificateExpiry",
    "ServiceSample",
    "certificate_expiries",
    "role_metrics",
    "samples_from_rows",
    "read_last_apply",
    "render_metrics",
    "role_head",
    "write_textfile",
]


@recordclass.frozen(kw_only=True)
class ApplyOutcome:
    """How the last apply of a role ended."""

    role: str
    """The role applied."""
    ok: bool
    """True when every service runs (or, for milestones, is done)."""
    seconds: float
    """How long the apply took."""
    timestamp: float
    """When it finished (unix time)."""


@recordclass.frozen(kw_only=True)
class ServiceSample:
    """One service's state as ``status`` sees it."""

    name: str
    """The service."""
    state: str
    """One of :data:`STATES`."""
    restarts: int = 0
    """Restarts counted by the supervisor or init system."""


@recordclass.frozen(kw_only=True)
class CertificateExpiry:
    """When a certificate a service mints stops being valid."""

    service: str
    """The service whose pre-start step mints it."""
    path: str
    """Its node path."""
    not_after: float
    """Expiry (unix time)."""


def role_head(
    *,
    apply: ApplyOutcome | None,
    certificates: Sequence[CertificateExpiry] = (),
) -> Exposition:
    """The role-level families: the last apply's and the certificates' (the native supervisor
    is handed their text and appends the service families itself)."""
    out = Exposition()
    applied = [apply] if apply is not None else []
    out.family(
        "noderole_apply_success",
        "gauge",
        "1 when the last noderole apply of the role succeeded, 0 when a service failed.",
        ((labels(role=a.role), 1 if a.ok else 0) for a in applied),
    )
    out.family(
        "noderole_apply_duration_seconds",
        "gauge",
        "Duration of the last noderole apply of the role.",
        ((labels(role=a.role), a.seconds) for a in applied),
    )
    out.family(
        "noderole_apply_timestamp_seconds",
        "gauge",
        "Unix time at which the last noderole apply of the role finished.",
        ((labels(role=a.role), a.timestamp) for a in applied),
    )
    out.family(
        "noderole_certificate_expiry_timestamp_seconds",
        "gauge",
        "Unix time at which a certificate minted for the service expires.",
        ((labels(service=c.service, path=c.path), c.not_after) for c in certificates),
    )
    return out


def render_metrics(
    *,
    role: str,
    apply: ApplyOutcome | None,
    services: Sequence[ServiceSample],
    certificates: Sequence[CertificateExpiry] = (),
) -> str:
    """The exposition text (ends with a newline; families without samples are left out)."""
    out = role_head(apply=apply, certificates=certificates)
    service_families(out, role=role, services=((s.name, s.state, s.restarts) for s in services))
    return out.text()


def write_textfile(directory: Path, text: str) -> Path:
    """Replace ``directory/noderole.prom`` atomically (the collector never sees half a file).

    The temporary file is created ``O_EXCL|O_NOFOLLOW`` next to it, flushed, then renamed
    (:func:`noderole.atomic.write_atomic`). Raises ``FileNotFoundError`` naming the setting when
    the directory does not exist. The directory is reached as the native supervisor reaches it
    (:func:`noderole.supervisor._safeopen.open_dir`): a symbolic link on the way that sits in a
    directory other users can write (node_exporter's own state directory) is refused, so such a
    user cannot point root's write at another directory.
    """
    from noderole.atomic import write_atomic
    from noderole.supervisor._safeopen import open_dir

    if not directory.is_dir():
        raise FileNotFoundError(
            f"textfile_dir {directory} is not a directory: create it (node_exporter's "
            "--collector.textfile.directory) or unset [noderole] textfile_dir"
        )
    path = directory / TEXTFILE
    fd = open_dir(str(directory.absolute()))
    try:
        write_atomic(path, text.encode(), mode=0o644, dir_fd=fd)
    finally:
        os.close(fd)
    return path


def read_last_apply(root: NodeRoot, role: str) -> ApplyOutcome | None:
    """The last apply's outcome when it is of ``role`` (None when absent, unreadable or of
    another role), from the record ``apply`` keeps (:data:`noderole.paths.LAST_APPLY_FILE`)."""
    from noderole.state import read_last_apply as read_record

    data = read_record(root)
    try:
        outcome = ApplyOutcome(
            role=str(data["role"]),
            ok=bool(data["ok"]),
            seconds=float(data["seconds"]),
            timestamp=float(data["at"]),
        )
    except (ValueError, KeyError, TypeError):
        return None
    return outcome if outcome.role == role else None


def samples_from_rows(rows: Iterable[Mapping[str, object]]) -> list[ServiceSample]:
    """Samples from ``status``'s rows (``name``, ``state``, ``restarts``)."""
    return [
        ServiceSample(
            name=str(r["name"]),
            state=str(r["state"]),
            restarts=int(r.get("restarts") or 0),  # type: ignore[call-overload]
        )
        for r in rows
    ]


def certificate_expiries(plan: Plan, root: NodeRoot) -> list[CertificateExpiry]:
    """Expiry of every certificate the plan's services mint and that exists on the node."""
    from noderole.records import MintCertificate

    found = []
    for entry in plan.services:
        for step in entry.service.pre_start:
            if not isinstance(step, MintCertificate):
                continue
            not_after = _not_after(root.resolve(step.cert_path))
            if not_after is not None:
                found.append(
                    CertificateExpiry(service=entry.name, path=step.cert_path, not_after=not_after)
                )
    return found


def _not_after(path: Path) -> float | None:
    import warnings

    from cryptography import x509

    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        with warnings.catch_warnings():
            # k3s-like certificates with serial 0 warn; the date is all that is read here.
            warnings.simplefilter("ignore")
            cert = x509.load_pem_x509_certificate(data)
    except ValueError:
        return None
    return cert.not_valid_after_utc.timestamp()


def role_metrics(plan: Plan, root: NodeRoot, rows: Iterable[Mapping[str, object]]) -> str:
    """The exposition for ``plan``'s role: last apply, ``status`` rows, certificates."""
    return render_metrics(
        role=plan.role,
        apply=read_last_apply(root, plan.role),
        services=samples_from_rows(rows),
        certificates=certificate_expiries(plan, root),
    )
