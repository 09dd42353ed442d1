"""``noderole cert``: mint-or-reuse a serving pair, and check certificates on a node.

``cert mint`` is the drop-in for the seed's ``eks-konnectivity-cert`` (same inputs, same
``CERTPATH<TAB>KEYPATH`` output). ``cert check`` is in the spirit of ``kubeadm certs
check-expiration``. Importing this module stays cheap: cryptography is imported inside the
commands only.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from noderole.cli import Group
from noderole.errors import CertificateError, DefinitionError, UsageError

if TYPE_CHECKING:
    from noderole.certs import CertReport
    from noderole.cli._app import App

__all__ = ["cert"]


@click.group(name="cert", cls=Group)
def cert() -> None:
    """Mint or check TLS serving certificates signed by a cluster CA."""


@cert.command(name="mint")
@click.option(
    "--dir",
    "directory",
    required=True,
    help="Node directory for tls.crt and tls.key (never the CA's own files).",
)
@click.option("--ca-cert", required=True, help="Node path of the CA certificate (PEM).")
@click.option("--ca-key", required=True, help="Node path of the CA private key (PEM).")
@click.option(
    "--cn", "common_name", required=True, help="Subject common name of the leaf (1-64 characters)."
)
@click.option("--sans", required=True, help="Comma-separated DNS names and IP addresses.")
@click.option(
    "--renew-before-days",
    type=click.IntRange(min=0, max=364),
    default=90,
    show_default=True,
    help="Re-mint when fewer days than this remain.",
)
@click.pass_obj
def mint(
    app: App,
    directory: str,
    ca_cert: str,
    ca_key: str,
    common_name: str,
    sans: str,
    renew_before_days: int,
) -> None:
    """Reuse DIR/tls.crt + DIR/tls.key if still good, else mint a new pair from the CA.

    Prints CERTPATH<TAB>KEYPATH (node paths) on stdout, and what was done and why on stderr.
    Refuses (exit 2) a --ca-cert or --ca-key that is DIR/tls.crt or DIR/tls.key, and, before
    writing, a pair that is a CA file under another name (exit 7). A CA not valid yet by this
    node's clock is waited for, up to 120 s (the clock set by NTP meanwhile), then refused.
    """
    from noderole.certs import ensure_certificate
    from noderole.records import MintCertificate
    from noderole.sans import parse_sans

    parse_sans(sans)  # a bad SAN is a certificate error (exit 7) naming the entry, as documented
    try:
        request = MintCertificate(
            directory=directory,
            ca_cert=ca_cert,
            ca_key=ca_key,
            common_name=common_name,
            sans=(sans,),
            renew_before_days=renew_before_days,
        )
    except DefinitionError as error:
        option = _MINT_OPTIONS.get(error.field or "", "")
        given = error.value
        hint = ""
        if option in _PATH_OPTIONS and isinstance(given, str) and not given.startswith("/"):
            hint = "; node paths are absolute (e.g. /var/lib/x)"
        raise UsageError(f"cert mint: {option}{': ' if option else ''}{error}{hint}") from None
    # A CA not valid yet by this node's clock is waited for, up to a bound; say so while it lasts.
    outcome = ensure_certificate(
        request, root=app.root, clock=app.clock, waiting=lambda text: click.echo(text, err=True)
    )
    kept = " (key kept)" if outcome.action == "minted" and outcome.key_kept else ""
    click.echo(f"{outcome.action}{kept}: {outcome.reason}", err=True)
    click.echo(f"{request.cert_path}\t{request.key_path}")


_MINT_OPTIONS = {
    "directory": "--dir",
    "ca_cert": "--ca-cert",
    "ca_key": "--ca-key",
    "common_name": "--cn",
    "sans": "--sans",
}
"""The option of ``cert mint`` that gave each field of its record."""
_PATH_OPTIONS = ("--dir", "--ca-cert", "--ca-key")


def _local(app: App, path: str, what: str) -> Path:
    """A node path (absolute) under the root; a relative path as it is, from the working dir.
    A node path climbing above / with '..' is a usage error naming ``what`` gave it."""
    if not path.startswith("/"):
        return Path(path)
    try:
        return app.root.resolve(path)
    except ValueError as error:
        raise UsageError(f"cert check: {what} {path!r}: {error}") from None


@cert.command(name="check")
@click.argument("paths", nargs=-1)
@click.option(
    "--role",
    default=None,
    help="Instead of PATHs: every certificate the role's services mint, checked as they would be.",
)
@click.option("--ca-cert", default=None, help="Node path of the CA to check the issuer against.")
@click.option(
    "--renew-before-days",
    type=click.IntRange(min=0, max=364),
    default=90,
    show_default=True,
    help="Renewal window used for the verdict.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def check(
    app: App,
    paths: tuple[str, ...],
    role: str | None,
    ca_cert: str | None,
    renew_before_days: int,
    as_json: bool,
) -> None:
    """Show subject, SANs, expiry and issuer of each certificate, and whether it would be reused.

    Absolute PATHs are node paths (resolved under --root; one whose '..' climbs above / is a
    usage error, as for --ca-cert). A key next to a certificate (X.key for
    X.crt) is checked against it. Exits 1 when any certificate is unreadable, would be re-minted,
    or (with --ca-cert) is inside its renewal window and expires with the CA: only rotating the
    CA renews it.

    With --role ROLE: every certificate ROLE's services mint, checked against the CA, names and
    renewal window of its step, with days left; exits 1 when one is due for renewal.
    """
    if role is not None:
        if paths or ca_cert:
            given = [*(["PATHs"] if paths else []), *(["--ca-cert"] if ca_cert else [])]
            raise UsageError(
                f"cert check: --role cannot be combined with {' and '.join(given)}: it checks "
                f"each certificate the role mints against its own step's CA; give --role ROLE "
                f"alone, or PATHs (with --ca-cert)"
            )
        _check_role(app, role, as_json=as_json)
        return
    if not paths:
        raise UsageError("cert check: name certificate PATHs, or --role ROLE")
    from noderole.certs import inspect_certificate

    now = dt.datetime.fromtimestamp(app.clock.time(), tz=dt.UTC)
    ca = _local(app, ca_cert, "--ca-cert") if ca_cert else None
    locals_ = [_local(app, path, "PATH") for path in paths]  # every one checked before any read
    rows: list[tuple[str, CertReport | CertificateError]] = []
    for path, local in zip(paths, locals_, strict=True):
        try:
            report: CertReport | CertificateError = inspect_certificate(
                local, ca_cert=ca, now=now, renew_before_days=renew_before_days
            )
        except CertificateError as error:
            report = error
        rows.append((path, report))
    if as_json:
        click.echo(json.dumps([_as_json(path, report) for path, report in rows], indent=2))
    else:
        click.echo(_table(rows, ca_checked=ca is not None))
    if any(
        isinstance(report, CertificateError) or not report.reusable or report.warning
        for _, report in rows
    ):
        raise click.exceptions.Exit(1)


def _as_json(path: str, report: CertReport | CertificateError) -> dict[str, object]:
    if isinstance(report, CertificateError):
        return {"path": path, "error": str(report)}
    return {
        "path": path,
        "common_name": report.common_name,
        "sans": list(report.sans),
        "not_before": report.not_before.isoformat(),
        "not_after": report.not_after.isoformat(),
        "days_left": report.days_left,
        "issuer": report.issuer,
        "fingerprint_sha256": report.fingerprint,
        "key_checked": report.key_checked,
        "ca_checked": report.ca_checked,
        "reusable": report.reusable,
        "reason": report.reason,
        "warning": report.warning or None,
    }


def _table(rows: list[tuple[str, CertReport | CertificateError]], *, ca_checked: bool) -> str:
    header = ("CERTIFICATE", "SUBJECT CN", "SANS", "EXPIRES", "DAYS LEFT", "ISSUER", "REUSE")
    lines: list[tuple[str, ...]] = [header]
    for path, report in rows:
        if isinstance(report, CertificateError):
            lines.append((path, "-", "-", "-", "-", "-", f"error: {report}"))
            continue
        verdict = "yes" if report.reusable else f"no: {report.reason}"
        if report.reusable and not ca_checked:
            verdict = "yes (CA not checked)"
        elif report.warning:
            verdict = f"yes, but cannot be renewed: {report.warning}"
        lines.append(
            (
                path,
                report.common_name or "-",
                ",".join(report.sans) or "-",
                report.not_after.strftime("%b %d, %Y %H:%M UTC"),
                str(report.days_left),
                report.issuer or "-",
                verdict,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True)), line[-1]])
        for line in lines
    )


def _check_role(app: App, role: str, *, as_json: bool) -> None:
    """``cert check --role``: the role's certificates, one line each; exit 1 when one is due."""
    checks = app.certificates(role)
    if as_json:
        click.echo(json.dumps([c.to_dict() for c in checks], indent=2))
    elif not checks:
        click.echo(f"role {role}: no service mints a certificate")
    else:
        header = ("SERVICE", "CERTIFICATE", "ISSUER", "SANS", "EXPIRES", "DAYS LEFT", "RENEW")
        lines: list[tuple[str, ...]] = [header]
        for c in checks:
            verdict = f"error: {c.error}" if c.error else (f"due: {c.reason}" if c.due else "no")
            lines.append(
                (
                    c.service,
                    c.path,
                    c.issuer or "-",
                    ",".join(c.sans) or "-",
                    c.not_after.strftime("%b %d, %Y %H:%M UTC") if c.not_after else "-",
                    str(c.days_left) if c.days_left is not None else "-",
                    verdict,
                )
            )
        widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
        for line in lines:
            cells = [cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True)]
            click.echo("  ".join([*cells, line[-1]]))
    if any(c.due for c in checks):
        raise click.exceptions.Exit(1)
