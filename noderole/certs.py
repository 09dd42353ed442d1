"""Mint, or reuse while still good, a TLS serving pair signed by a cluster CA.

Replaces the seed's ``eks-konnectivity-cert -dir D -ca-cert C -ca-key K -cn CN -sans LIST``. The
pair is ``DIR/tls.crt`` + ``DIR/tls.key``: an ECDSA P-256 key and a leaf certificate valid for 365
days (never past the CA), for server authentication only.

An existing pair is reused only when every rule of :func:`reuse_verdict` holds; otherwise a new
certificate is minted and the reason recorded (``SANs changed: +a.example -10.0.0.1``). When only
the certificate needs renewing and the existing key is a sound P-256 key matching it, the key is
kept so only the certificate changes. Files are written with :mod:`noderole.atomic`: the key (only
when new) before the certificate, so a crash at any point leaves either the old valid pair or a
mismatched pair that the next run detects and repairs.

k3s makes its CA with serial number 0, which cryptography deprecates with a warning on every load;
the warning is silenced around loading only, so ``-W error`` still catches every other one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import stat
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from noderole import recordclass
from noderole.atomic import FileSpec, StepHook, remove_stale_temps, write_files
from noderole.certstamp import CertOutcome, record_stamp
from noderole.clock import Clock
from noderole.errors import CertificateError
from noderole.reading import read_regular, read_regular_file
from noderole.records import CA_CLOCK_WAIT, MintCertificate
from noderole.root import NodeRoot
from noderole.sans import SubjectAltName, parse_sans

if TYPE_CHECKING:  # a mint reads and writes through strings: pathlib costs a fresh apply 6M
    from pathlib import Path

    from noderole.stepcontext import Cancel

__all__ = [
    "CERT_NAME",
    "CLOCK_WAIT",
    "KEY_NAME",
    "LEAF_LIFETIME",
    "CANotYetValid",
    "CertOutcome",
    "CertReport",
    "CertificateAuthority",
    "certificate_fingerprint",
    "ensure_certificate",
    "StepVerdict",
    "inspect_certificate",
    "judge_step",
    "load_ca",
    "reuse_verdict",
    "step_verdict",
    "warm_signing",
]

CERT_NAME = "tls.crt"
KEY_NAME = "tls.key"
LEAF_LIFETIME = dt.timedelta(days=365)
"""How long a minted leaf is valid (k3s issues its own leaves for the same time)."""
BACKDATE = dt.timedelta(hours=1)
"""A leaf is valid from an hour ago, so a node whose clock is a little behind accepts it."""
CERT_MODE = 0o644
KEY_MODE = 0o600
DIR_MODE = 0o700
ROTATE_CA = "rotate the cluster CA (k3s certificate rotate-ca), then renew"
"""The fix for a certificate that cannot be renewed because its CA expires first."""

CAKey: TypeAlias = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


# --------------------------------------------------------------------------- loading


def _load_certificates(data: bytes) -> list[x509.Certificate]:
    """Every PEM certificate in ``data``; k3s's serial-0 CA warning is silenced here only."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", category=CryptographyDeprecationWarning, message=".*serial number.*"
        )
        return x509.load_pem_x509_certificates(data)


def _read(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        return read_regular(path)  # a mistyped path onto a FIFO or a device is refused at once
    except FileNotFoundError:
        raise CertificateError(f"{what} {path} does not exist; check the path") from None
    except OSError as error:
        raise CertificateError(f"cannot read {what} {path}: {error.strerror}") from None


def _ca_certificates(path: str | os.PathLike[str]) -> list[x509.Certificate]:
    data = _read(path, "CA certificate")  # its own message: not "holds no PEM" of a FIFO
    try:
        return _load_certificates(data)
    except ValueError as error:
        raise CertificateError(
            f"CA certificate {path} holds no readable PEM certificate ({error}); point it at the "
            f"cluster CA's PEM file"
        ) from None


@recordclass.frozen(kw_only=True)
class CertificateAuthority:
    """A loaded, checked CA: its certificate (the signer), its key, and the rest of its file."""

    cert: x509.Certificate
    """The signer: the first certificate of the CA file."""
    key: CAKey
    """The signer's private key."""
    chain: tuple[x509.Certificate, ...]
    """Every certificate of the CA file, signer first."""
    cert_path: str | os.PathLike[str]
    """Where the CA certificate was read (on this machine), as :func:`load_ca` was given it."""

    @property
    def bundle(self) -> tuple[x509.Certificate, ...]:
        """Certificates served after the leaf: the CA file's intermediates (not self-issued)."""
        return tuple(c for c in self.chain if c.issuer != c.subject)


class CANotYetValid(CertificateError):
    """A CA certificate that is not valid yet by this node's clock: the one fault of a CA that
    time alone mends (NTP stepping a clock that came up behind, or the few seconds by which this
    node's clock trails the server that made the CA passing). :func:`ensure_certificate` waits
    for it, up to :data:`CLOCK_WAIT`; every other fault of a CA fails at once."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        not_before: dt.datetime,
        now: dt.datetime,
        waited: float | None = None,
    ) -> None:
        self.path = path
        """The CA certificate, as :func:`load_ca` was given it."""
        self.not_before = not_before
        """The CA's notBefore (UTC)."""
        self.now = now
        """This node's clock when the CA was last checked (UTC)."""
        self.waited = waited
        """Seconds waited for the clock before giving up, or None when nothing waited."""
        first = f"CA certificate {path} is not valid until {_when(not_before)}"
        if waited is None:
            message = f"{first}; check this node's clock (it reads {_when(now)})"
        else:
            message = (
                f"{first}, and this node's clock reads {_when(now)}: the clock is behind (waited "
                f"{waited:g} s for it to be set, by NTP for instance); set the clock, then run "
                f"`noderole apply`"
            )
        super().__init__(message)


def _check_ca_certificate(
    cert: x509.Certificate, path: str | os.PathLike[str], now: dt.datetime
) -> None:
    """Refuse what is wrong with the CA certificate whatever the time: not a CA, not allowed to
    sign, or expired. Whether it is valid yet is :func:`_check_ca_started`'s, checked last."""
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise CertificateError(
            f"CA certificate {path} is not a CA (no BasicConstraints CA:TRUE); point ca_cert at "
            f"the cluster CA that signs serving certificates"
        )
    try:
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        usage = None
    if usage is not None and not usage.key_cert_sign:
        raise CertificateError(
            f"CA certificate {path} is not allowed to sign certificates (its KeyUsage lacks "
            f"keyCertSign); point ca_cert at the cluster CA that signs serving certificates "
            f"(k3s: server-ca.crt), or re-issue the CA with keyUsage keyCertSign"
        )
    if now >= cert.not_valid_after_utc:
        raise CertificateError(
            f"CA certificate {path} expired on {_when(cert.not_valid_after_utc)}; rotate the "
            f"cluster CA"
        )


def _check_ca_started(
    cert: x509.Certificate, path: str | os.PathLike[str], now: dt.datetime
) -> None:
    if now < cert.not_valid_before_utc:
        raise CANotYetValid(path, not_before=cert.not_valid_before_utc, now=now)


def load_ca(
    cert_path: str | os.PathLike[str], key_path: str | os.PathLike[str], *, now: dt.datetime
) -> CertificateAuthority:
    """Load and check a CA: a CA certificate valid at ``now`` and the private key that matches it.

    The key is EC or RSA, PEM, SEC1/PKCS#1 or PKCS#8, unencrypted. Raises
    :class:`CertificateError` naming the file at fault; :class:`CANotYetValid` (at once, never
    waiting) when the CA is sound but ``now`` is before its notBefore: that is checked last, so
    a CA that is also wrong otherwise (a key that does not match it) says so.
    """
    chain = _ca_certificates(cert_path)
    signer = chain[0]
    _check_ca_certificate(signer, cert_path, now)
    key_pem = _read(key_path, "CA key")
    if not key_pem.strip():
        raise CertificateError(
            f"CA key {key_path} is empty; point ca_key at the cluster CA's private key (PEM)"
        )
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        raise CertificateError(
            f"CA key {key_path} is encrypted; give an unencrypted PEM key"
        ) from None
    except (ValueError, UnsupportedAlgorithm) as error:
        hint = ""
        if b"-----BEGIN" not in key_pem:  # DER, most likely: the same key, another encoding
            hint = (
                f"; it is not PEM (DER?): convert it with `openssl pkey -inform DER -in "
                f"{key_path} -out {key_path}.pem` and point ca_key at the .pem file"
            )
        raise CertificateError(
            f"CA key {key_path} is not a readable PEM private key ({error}){hint}"
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        kind = type(key).__name__.removesuffix("PrivateKey").lstrip("_")
        raise CertificateError(
            f"CA key {key_path} is of type {kind}; only EC and RSA CA keys are supported (k3s "
            f"makes an EC P-256 key)"
        )
    if key.public_key() != signer.public_key():
        for number, other in enumerate(chain[1:], start=2):
            if key.public_key() == other.public_key():
                raise CertificateError(
                    f"CA key {key_path} matches certificate {number} of {cert_path} "
                    f"({other.subject.rfc4514_string()}), not the first: the signing "
                    f"certificate must come first in the CA file; put that certificate first"
                )
        raise CertificateError(
            f"CA key {key_path} does not match CA certificate {cert_path}; give the key of that CA"
        )
    _check_ca_keys(chain, cert_path)
    _check_ca_started(signer, cert_path, now)
    return CertificateAuthority(cert=signer, key=key, chain=tuple(chain), cert_path=cert_path)


MIN_RSA_BITS = 2048
"""The smallest RSA key a CA of the file may have: OpenSSL at security level 2 (Debian's and
RHEL's default) refuses a chain with a smaller one (``CA certificate key too weak``)."""
_RSA_PSS = "1.2.840.113549.1.1.10"


def _check_ca_keys(chain: Sequence[x509.Certificate], path: str | os.PathLike[str]) -> None:
    """Refuse a CA file whose keys TLS clients refuse: an RSA-PSS key (Go's crypto/x509, which
    konnectivity-agent verifies with, cannot use one) or an RSA key under 2048 bits."""
    for number, cert in enumerate(chain, start=1):
        which = (
            "" if len(chain) == 1 else f" (certificate {number}, {cert.subject.rfc4514_string()})"
        )
        algorithm = getattr(cert, "public_key_algorithm_oid", None)
        if algorithm is not None and algorithm.dotted_string == _RSA_PSS:
            raise CertificateError(
                f"CA certificate {path}{which} has an RSA-PSS key: TLS clients built on Go's "
                f"crypto/x509 (konnectivity-agent) cannot verify a chain through it; give a CA "
                f"with an EC or a plain RSA key (k3s makes an EC P-256 CA)"
            )
        public = cert.public_key()
        if isinstance(public, rsa.RSAPublicKey) and public.key_size < MIN_RSA_BITS:
            raise CertificateError(
                f"CA certificate {path}{which} has a {public.key_size}-bit RSA key: TLS clients "
                f"at OpenSSL's default security level refuse it (CA certificate key too weak); "
                f"give a CA with an RSA key of at least {MIN_RSA_BITS} bits or an EC key"
            )


# --------------------------------------------------------------------------- as a client

WILDCARD_PROBE = "agent-1"
"""The label a wildcard SAN is checked with (``*.nlb.example`` as ``agent-1.nlb.example``)."""


def _verify_for_clients(
    leaf: x509.Certificate,
    served: Sequence[x509.Certificate],
    chain: Sequence[x509.Certificate],
    sans: Sequence[SubjectAltName],
    *,
    now: dt.datetime,
) -> str | None:
    """Why a TLS client that trusts the CA file's root refuses ``leaf`` (served with
    ``served`` after it) for one of ``sans``, or None: RFC 5280 path validation by
    cryptography's verifier, per SAN. Its extension rules are relaxed to what OpenSSL and Go
    enforce (a CA's basicConstraints need not be critical, nor its keyUsage present); a CA's
    extendedKeyUsage must allow serverAuth. With cryptography older than 45 (no relaxed rules)
    nothing is checked."""
    import ipaddress

    from cryptography.x509 import verification as v

    if not hasattr(v.PolicyBuilder, "extension_policies"):
        return None
    roots = [c for c in chain if c.issuer == c.subject] or [chain[-1]]

    def server_auth(_policy: object, cert: x509.Certificate, eku: object) -> None:
        if isinstance(eku, x509.ExtendedKeyUsage) and not {
            ExtendedKeyUsageOID.SERVER_AUTH,
            ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE,
        } & set(eku):
            raise ValueError(f"{_EKU_REFUSED} ({cert.subject.rfc4514_string()})")

    agnostic = v.Criticality.AGNOSTIC
    ca_policy = (
        v.ExtensionPolicy.permit_all()
        .require_present(x509.BasicConstraints, agnostic, None)
        .may_be_present(x509.ExtendedKeyUsage, agnostic, server_auth)
    )
    ee_policy = v.ExtensionPolicy.permit_all().require_present(
        x509.SubjectAlternativeName, agnostic, None
    )
    builder = (
        v.PolicyBuilder()
        .store(v.Store(roots))
        .time(now)
        .extension_policies(ca_policy=ca_policy, ee_policy=ee_policy)
    )
    for san in sans:
        subject: x509.DNSName | x509.IPAddress
        if san.kind == "ip":
            subject = x509.IPAddress(ipaddress.ip_address(san.value))
        else:
            subject = x509.DNSName(san.value.replace("*", WILDCARD_PROBE, 1))
        try:
            builder.build_server_verifier(subject).verify(leaf, list(served))
        except v.VerificationError as error:
            return (
                str(error)
                .removeprefix("validation failed: ")
                .removeprefix("candidates exhausted: ")
            )
    return None


_EKU_REFUSED = "a CA's extendedKeyUsage lacks serverAuth"


def _name_constraints(chain: Sequence[x509.Certificate]) -> list[x509.NameConstraints]:
    found = []
    for cert in chain:
        with contextlib.suppress(x509.ExtensionNotFound):
            found.append(cert.extensions.get_extension_for_class(x509.NameConstraints).value)
    return found


def _in_subtree(san: SubjectAltName, subtree: x509.GeneralName) -> bool:
    import ipaddress

    if san.kind == "ip":
        return isinstance(subtree, x509.IPAddress) and (
            ipaddress.ip_address(san.value) in subtree.value  # type: ignore[operator]
        )
    if not isinstance(subtree, x509.DNSName):
        return False
    base = subtree.value.lower().lstrip(".")
    return san.value == base or san.value.endswith("." + base)


def _refused_sans(
    chain: Sequence[x509.Certificate], sans: Sequence[SubjectAltName], problem: str
) -> list[str]:
    """The SANs the CA file's nameConstraints refuse (for the message; the verifier decides)."""
    refused = []
    for san in sans:
        kind = x509.IPAddress if san.kind == "ip" else x509.DNSName
        for constraint in _name_constraints(chain):
            excluded = constraint.excluded_subtrees or []
            permitted = [p for p in constraint.permitted_subtrees or [] if isinstance(p, kind)]
            if "excluded" in problem and any(_in_subtree(san, e) for e in excluded):
                refused.append(str(san))
                break
            if (
                "permitted" in problem
                and permitted
                and not any(_in_subtree(san, p) for p in permitted)
            ):
                refused.append(str(san))
                break
    return refused


def _client_refusal(
    problem: str,
    ca_path: str | os.PathLike[str],
    chain: Sequence[x509.Certificate],
    sans: Sequence[SubjectAltName],
) -> str:
    """A message for what :func:`_verify_for_clients` found: what the CA forbids and the fix."""
    drop = "drop it from the SANs (EKS_KONNECTIVITY_SANS, cert mint --sans)"
    if "name constraint" in problem:
        names = ", ".join(_refused_sans(chain, sans, problem)) or "a SAN"
        rule = "exclude" if "excluded" in problem else "do not permit"
        return (
            f"the CA {ca_path} forbids {names}: its nameConstraints {rule} it, so every TLS "
            f"client would refuse the certificate; give a CA that permits it, or {drop}"
        )
    if _EKU_REFUSED in problem:
        return (
            f"the CA {ca_path} may not issue serving certificates: {problem.strip()}, so every "
            f"TLS client would refuse the certificate (unsuitable certificate purpose); give a "
            f"CA whose extendedKeyUsage allows serverAuth (or has none)"
        )
    if "path length" in problem:
        return (
            f"the chain of {ca_path} is longer than one of its CA certificates allows "
            f"(pathLenConstraint), so every TLS client would refuse the certificate; give the "
            f"CA file a chain its root allows (sign with a CA nearer the root)"
        )
    return (
        f"a TLS client trusting {ca_path} would refuse the certificate ({problem}); give a CA "
        f"that TLS clients accept"
    )


# --------------------------------------------------------------------------- verdict


@recordclass.frozen(kw_only=True)
class _Existing:
    """What was found in the directory."""

    cert_pem: bytes | None
    key_pem: bytes | None
    key_mode: int | None
    key_foreign: str = ""
    """Why the key file is not one this process wrote (another owner, a second hard link), or
    empty: such a key is never kept, whoever may hold a copy."""


@recordclass.frozen(kw_only=True)
class _Verdict:
    reuse: bool
    reason: str
    cert: x509.Certificate | None = None
    key: ec.EllipticCurvePrivateKey | None = None
    """The existing key, when it is a P-256 key matching the existing certificate (keepable)."""
    warning: str = ""
    """Set when the pair is kept but cannot be renewed: inside its renewal window, it expires
    with its CA, so only rotating the CA helps (what ``cert check`` and ``renew`` report)."""


def _when(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _san_set(cert: x509.Certificate) -> set[SubjectAltName]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    found: set[SubjectAltName] = set()
    for name in ext:
        if isinstance(name, x509.DNSName):
            found.add(SubjectAltName("dns", name.value))
        elif isinstance(name, x509.IPAddress):
            found.add(SubjectAltName("ip", str(name.value)))
        else:
            found.add(SubjectAltName("dns", f"<{type(name).__name__}>"))
    return found


def _common_name(name: x509.Name) -> str | None:
    values = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(values[0].value) if values else None


def _is_server_leaf(cert: x509.Certificate) -> str | None:
    """Why ``cert`` cannot serve TLS as a leaf, or None."""
    try:
        if cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            return "the existing certificate is a CA certificate, not a serving leaf"
    except x509.ExtensionNotFound:
        pass
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return "the existing certificate has no extended key usage serverAuth"
    if ExtendedKeyUsageOID.SERVER_AUTH not in eku:
        return "the existing certificate lacks extended key usage serverAuth"
    return None


def _assess(
    existing: _Existing,
    *,
    ca_cert: x509.Certificate | None,
    ca_bundle: Sequence[x509.Certificate] | None,
    common_name: str | None,
    sans: Sequence[SubjectAltName] | None,
    renew_before_days: int,
    now: dt.datetime,
    check_key: bool = True,
    ca_chain: Sequence[x509.Certificate] | None = None,
) -> _Verdict:
    """The reuse verdict for an existing pair; None expectations are not checked."""
    if existing.cert_pem is None:
        return _Verdict(reuse=False, reason="no existing certificate")
    try:
        certs = _load_certificates(existing.cert_pem)
    except ValueError:
        return _Verdict(reuse=False, reason="the existing certificate is unreadable")
    cert = certs[0]
    key: ec.EllipticCurvePrivateKey | None = None
    if check_key:
        if existing.key_pem is None:
            return _Verdict(reuse=False, reason="no existing key", cert=cert)
        try:
            loaded = serialization.load_pem_private_key(existing.key_pem, password=None)
        except (TypeError, ValueError, UnsupportedAlgorithm):
            return _Verdict(reuse=False, reason="the existing key is unreadable", cert=cert)
        if loaded.public_key() != cert.public_key():
            return _Verdict(
                reuse=False, reason="the existing key does not match the certificate", cert=cert
            )
        if existing.key_foreign:
            # Someone else wrote it (a service's user who can write the directory): re-signing
            # it would give him a serving certificate of the cluster's CA for a key he holds.
            return _Verdict(
                reuse=False, reason=f"the existing key {existing.key_foreign}", cert=cert
            )
        loose = existing.key_mode is not None and existing.key_mode & 0o077
        if (
            not loose
            and isinstance(loaded, ec.EllipticCurvePrivateKey)
            and isinstance(loaded.curve, ec.SECP256R1)
        ):
            key = loaded
        if loose:
            return _Verdict(
                reuse=False,
                reason=f"the existing key is readable by others (mode {existing.key_mode:04o})",
                cert=cert,
            )

    def remint(reason: str) -> _Verdict:
        return _Verdict(reuse=False, reason=reason, cert=cert, key=key)

    if ca_cert is not None:
        if cert.issuer != ca_cert.subject:
            return remint(
                f"issued by a different CA (issuer {cert.issuer.rfc4514_string()!r}, "
                f"CA is {ca_cert.subject.rfc4514_string()!r})"
            )
        try:
            cert.verify_directly_issued_by(ca_cert)
        except (InvalidSignature, ValueError, TypeError):
            return remint("issued by a different CA (signature does not verify)")
    if ca_bundle is not None:
        served = [c.public_bytes(serialization.Encoding.DER) for c in certs[1:]]
        expected = [c.public_bytes(serialization.Encoding.DER) for c in ca_bundle]
        if served != expected:
            return remint("the CA chain after the certificate differs from the CA file")
    if common_name is not None:
        found_cn = _common_name(cert.subject)
        if found_cn != common_name:
            return remint(f"common name changed: {found_cn!r} -> {common_name!r}")
    if sans is not None:
        have = _san_set(cert)
        want = set(sans)
        if have != want:
            added = [str(s) for s in sans if s not in have]
            removed = sorted(str(s) for s in have - want)
            change = " ".join([*(f"+{a}" for a in added), *(f"-{r}" for r in removed)])
            return remint(f"SANs changed: {change}")
    problem = _is_server_leaf(cert)
    if problem:
        return remint(problem)
    if now < cert.not_valid_before_utc:
        return remint(f"not valid until {_when(cert.not_valid_before_utc)}")
    left = cert.not_valid_after_utc - now
    if left <= dt.timedelta(0):
        return remint(f"expired on {_when(cert.not_valid_after_utc)}")
    if ca_chain:
        names = [s for s in _san_set(cert) if not s.value.startswith("<")]
        refused = _verify_for_clients(cert, certs[1:], ca_chain, names, now=now)
        if refused is not None:
            return remint(f"TLS clients trusting the CA refuse it ({refused})")
    days = left.days
    window = dt.timedelta(days=renew_before_days)
    if ca_cert is not None and cert.not_valid_after_utc > ca_cert.not_valid_after_utc:
        # Its CA was re-issued (same key and name) to expire sooner: every client refuses the
        # chain once the CA expires. A new leaf is capped at the CA's expiry.
        reason = (
            f"valid until {_when(cert.not_valid_after_utc)}, past its CA's expiry on "
            f"{_when(ca_cert.not_valid_after_utc)}: clients refuse it from then on"
        )
        ca_left = ca_cert.not_valid_after_utc - now
        if ca_left <= window:
            reason += f"; the CA itself expires in {ca_left.days} days: {ROTATE_CA}"
        return remint(reason)
    if left <= window:
        if ca_cert is not None and cert.not_valid_after_utc >= ca_cert.not_valid_after_utc:
            # A new leaf cannot outlive the CA: re-minting would change nothing, every run. The
            # pair is kept, but whoever watches renewals must hear that only the CA can help.
            warning = (
                f"expires in {days} days, together with the CA (on "
                f"{_when(ca_cert.not_valid_after_utc)}): no certificate it signs can last "
                f"longer; {ROTATE_CA}"
            )
            return _Verdict(reuse=True, reason=warning, cert=cert, key=key, warning=warning)
        return remint(f"expires in {days} days (renewal window {renew_before_days} days)")
    return _Verdict(
        reuse=True,
        reason=f"valid until {_when(cert.not_valid_after_utc)} ({days} days left)",
        cert=cert,
        key=key,
    )


def reuse_verdict(
    cert_pem: bytes | None,
    key_pem: bytes | None,
    *,
    ca: CertificateAuthority,
    common_name: str,
    sans: Sequence[SubjectAltName],
    renew_before_days: int,
    now: dt.datetime,
) -> tuple[bool, str]:
    """Whether an existing pair (PEM bytes, None when absent) would be reused, and why (not).

    Reused only if ALL hold: both parse; the key matches the certificate; the certificate was
    issued by ``ca`` (issuer name equals the CA subject and the signature verifies, so a rotated CA
    with the same name forces a re-mint); the CN and the exact SAN set match; it is a serving leaf
    (not a CA, has serverAuth); it is valid at ``now`` and more than ``renew_before_days`` from
    expiry (unless it already expires with the CA, when a new one could not last longer).
    """
    verdict = _assess(
        _Existing(cert_pem=cert_pem, key_pem=key_pem, key_mode=None),
        ca_cert=ca.cert,
        ca_bundle=ca.bundle,
        ca_chain=ca.chain,
        common_name=common_name,
        sans=sans,
        renew_before_days=renew_before_days,
        now=now,
    )
    return verdict.reuse, verdict.reason


# --------------------------------------------------------------------------- minting


def _signing_hash(key: CAKey) -> hashes.SHA256 | hashes.SHA384 | hashes.SHA512:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if key.curve.key_size > 384:
            return hashes.SHA512()
        if key.curve.key_size > 256:
            return hashes.SHA384()
    return hashes.SHA256()


def warm_signing() -> None:
    """Import what signing a certificate imports on its first use: cryptography's OpenSSL
    backend (~2 ms, several under load). :func:`noderole.steps.warm_certificates` calls this in
    its background thread, so a first boot's mint does not pay for it between k3s writing its CA
    and konnectivity starting."""
    import cryptography.hazmat.backends.openssl.backend  # noqa: F401


def _mint(
    ca: CertificateAuthority,
    key: ec.EllipticCurvePrivateKey,
    *,
    common_name: str,
    sans: Sequence[SubjectAltName],
    now: dt.datetime,
) -> x509.Certificate:
    import ipaddress

    not_before = max(now.replace(microsecond=0) - BACKDATE, ca.cert.not_valid_before_utc)
    not_after = min(not_before + LEAF_LIFETIME, ca.cert.not_valid_after_utc)
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address(s.value)) if s.kind == "ip" else x509.DNSName(s.value)
        for s in sans
    ]
    try:
        ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski)
    except x509.ExtensionNotFound:
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key())
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(aki, critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
    )
    return builder.sign(ca.key, _signing_hash(ca.key))


# --------------------------------------------------------------------------- the step


def _read_existing(directory: str, *, tidy: bool = True) -> _Existing:
    """The pair in ``directory`` (missing files as None), refusing symbolic links anywhere and
    anything at ``tls.crt`` or ``tls.key`` but a regular file. ``tidy``: remove the temporary
    files a killed writer left (a mint does; a check that writes nothing does not)."""
    from noderole.supervisor._safeopen import open_dir

    parent, name = os.path.split(directory.rstrip("/"))
    try:
        # Its parents reached component by component: a link is followed only inside a
        # directory no other user can write (a service's user may own one on the way).
        parent_fd = open_dir(parent or "/")
    except FileNotFoundError:
        return _Existing(cert_pem=None, key_pem=None, key_mode=None)
    except OSError as error:
        raise CertificateError(f"cannot read {directory}: {error.strerror or error}") from None
    try:
        try:
            info = os.lstat(name, dir_fd=parent_fd)
        except FileNotFoundError:
            return _Existing(cert_pem=None, key_pem=None, key_mode=None)
        if stat.S_ISLNK(info.st_mode):
            raise CertificateError(
                f"refusing to use {directory}: it is a symbolic link (to "
                f"{os.readlink(name, dir_fd=parent_fd)}); the serving key is written only into "
                "a real directory, remove the link"
            )
        if not stat.S_ISDIR(info.st_mode):
            raise CertificateError(f"{directory} exists but is not a directory; remove it")
        try:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            dfd = os.open(name, flags, dir_fd=parent_fd)
        except OSError as error:
            raise CertificateError(f"cannot read {directory}: {error.strerror}") from None
    finally:
        os.close(parent_fd)
    try:
        if tidy:
            remove_stale_temps(dfd, [CERT_NAME, KEY_NAME])
        cert_pem, _ = _read_nofollow(dfd, directory, CERT_NAME)
        key_pem, key_info = _read_nofollow(dfd, directory, KEY_NAME)
    finally:
        os.close(dfd)
    if key_info is None:
        return _Existing(cert_pem=cert_pem, key_pem=key_pem, key_mode=None)
    foreign = ""
    if key_info.st_uid != os.geteuid():
        foreign = f"belongs to uid {key_info.st_uid}, not to uid {os.geteuid()} that mints it"
    elif key_info.st_nlink > 1:
        foreign = f"has {key_info.st_nlink} hard links (another name may be read by others)"
    return _Existing(
        cert_pem=cert_pem,
        key_pem=key_pem,
        key_mode=stat.S_IMODE(key_info.st_mode),
        key_foreign=foreign,
    )


def _judge(
    request: MintCertificate,
    ca: CertificateAuthority,
    *,
    directory: str,
    sans: Sequence[SubjectAltName],
    now: dt.datetime,
    tidy: bool = False,
) -> _Verdict:
    """The verdict on the pair in ``directory`` for ``request``: the one judge of a mint
    (:func:`ensure_certificate`, ``tidy``) and of the checks that write nothing
    (:func:`judge_step`), so a check never calls good a pair the mint would replace."""
    return _assess(
        _read_existing(directory, tidy=tidy),
        ca_cert=ca.cert,
        ca_bundle=ca.bundle,
        ca_chain=ca.chain,
        common_name=request.common_name,
        sans=sans,
        renew_before_days=request.renew_before_days,
        now=now,
    )


def _read_nofollow(
    dfd: int, directory: str, name: str
) -> tuple[bytes | None, os.stat_result | None]:
    """``name`` in ``dfd`` (``directory``), and its ``fstat``; None when absent. A symbolic link
    or anything but a regular file there (a FIFO is never waited on, a directory never read) is
    a :class:`CertificateError` naming the path, what it is and the fix."""
    path = os.path.join(directory, name)
    try:
        return read_regular_file(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None, None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise CertificateError(
                f"refusing to use {path}: it is a symbolic link (to "
                f"{os.readlink(name, dir_fd=dfd)}); remove the link and run again"
            ) from None
        if error.errno in (errno.EISDIR, errno.EINVAL):  # what read_regular_file refuses
            raise CertificateError(
                f"refusing to use {path}: {error.strerror}; remove it and run again"
            ) from None
        raise CertificateError(f"cannot read {path}: {error.strerror}") from None


def _now(clock: Clock) -> dt.datetime:
    return dt.datetime.fromtimestamp(clock.time(), tz=dt.UTC)


def _fingerprint(cert: x509.Certificate) -> str:
    return cert.fingerprint(hashes.SHA256()).hex()


CA_SETTLE = 1.0
"""Seconds since a CA file was written during which, if it does not parse, it may still be being
written: k3s writes its CA as client-go's ``cert.WriteCert`` does (create, then write), and a
path wait ends on the create."""
CA_LOOK_AGAIN = 0.02
"""Seconds between two reads of a CA that is still settling."""


CLOCK_WAIT: float = CA_CLOCK_WAIT
"""Longest time, in seconds on the monotonic clock, a mint waits for a CA that is not valid yet
by this node's clock (:class:`CANotYetValid`). k3s makes its CA valid from the moment it makes
it, with no backdate, so two things make a sound CA look "not valid yet": a node that comes up
with its clock behind (a board without a real-time clock starts at its image's build date) until
NTP steps it, a little after boot; and a server joining a cluster whose clock trails the first
server's by a few seconds. Both mend themselves within a boot's first minute or two, and a mint
that gave up at once left konnectivity-server down until someone ran ``noderole apply`` by hand.
120 s is what the seed's pre-start gives k3s to write the CA in the first place (and the
konnectivity plugin's ``wait_timeout``): a clock still wrong after that is not being set, and
the error says so."""
CLOCK_LOOK_AGAIN = 1.0
"""Longest time between two looks at this node's clock while a CA is not valid yet: a step of
the clock (NTP) ends the wait within it. A wait for skew alone ends at the CA's notBefore."""


def _settled_ca(
    cert_path: str,
    key_path: str,
    *,
    clock: Clock,
    waiting: Callable[[str], None] | None = None,
    cancel: Cancel | None = None,
) -> CertificateAuthority:
    """:func:`load_ca`, read again while it fails and either file was written less than
    :data:`CA_SETTLE` seconds ago, for :data:`CA_SETTLE` seconds at most (a file stamped in the
    future by a clock set back cannot keep it looking); then its error stands.

    A CA that is not valid yet by this node's clock (:class:`CANotYetValid`) is looked at again
    about once a second (:data:`CLOCK_LOOK_AGAIN`), the wall clock re-read each time, until it
    is valid, for :data:`CLOCK_WAIT` seconds of the monotonic clock at most; then it fails with
    the clock named and the fix. ``waiting`` is told once when that wait begins (never when the
    CA is valid at the first look); ``cancel`` ends it (:class:`~noderole.errors.WaitCancelled`).
    """
    deadline = clock.monotonic() + CA_SETTLE
    clock_deadline: float | None = None
    while True:
        try:
            return load_ca(cert_path, key_path, now=_now(clock))
        except CANotYetValid as error:
            behind = error
        except CertificateError:
            if clock.monotonic() >= deadline or not _written_within(
                CA_SETTLE, (cert_path, key_path), now=clock.time()
            ):
                raise
            clock.sleep(min(CA_LOOK_AGAIN, max(0.0, deadline - clock.monotonic())))
            continue
        looked = clock.monotonic()
        if clock_deadline is None:
            clock_deadline = looked + CLOCK_WAIT
            if waiting is not None:
                waiting(
                    f"waiting for this node's clock to reach {_when(behind.not_before)}, when CA "
                    f"certificate {cert_path} becomes valid (it reads {_when(behind.now)}; up to "
                    f"{CLOCK_WAIT:g}s)"
                )
        left = clock_deadline - looked
        if left <= 0:
            raise CANotYetValid(
                cert_path, not_before=behind.not_before, now=behind.now, waited=CLOCK_WAIT
            )
        until_valid = (behind.not_before - behind.now).total_seconds()
        _pause(clock, min(CLOCK_LOOK_AGAIN, left, max(CA_LOOK_AGAIN, until_valid)), cancel)
        # The CA files may be written again meanwhile: a half-written one settles afresh.
        deadline = clock.monotonic() + CA_SETTLE


def _pause(clock: Clock, seconds: float, cancel: Cancel | None) -> None:
    """Sleep ``seconds`` on ``clock``, looking at ``cancel`` (when given) at least every
    :data:`~noderole.waits.CANCEL_CHECK` seconds."""
    if cancel is None:
        clock.sleep(seconds)
        return
    from noderole.waits import CANCEL_CHECK  # only a wait for the clock comes here

    end = clock.monotonic() + seconds
    while True:
        cancel.check()
        left = end - clock.monotonic()
        if left <= 0:
            return
        clock.sleep(min(CANCEL_CHECK, left))


def _written_within(seconds: float, paths: Sequence[str], *, now: float) -> bool:
    for path in paths:
        with contextlib.suppress(OSError):
            if now - os.stat(path).st_mtime < seconds:
                return True
    return False


def _refuse_the_ca(request: MintCertificate, *, root: NodeRoot) -> None:
    """Refuse a pair whose file is the CA's own by another name: a link on the way, a second
    hard link or a bind mount (the record refuses the same name written twice). Minting would
    replace the cluster CA with the leaf, or serve with the CA's private key."""
    sources = [(node, root.local(node)) for node in (request.ca_cert, request.ca_key)]
    for node_pair, name in ((request.cert_path, CERT_NAME), (request.key_path, KEY_NAME)):
        local = root.local(node_pair)
        real = os.path.realpath(local)
        try:
            info: os.stat_result | None = os.stat(local)
        except OSError:
            info = None
        for node_ca, local_ca in sources:
            same = real == os.path.realpath(local_ca)
            if not same and info is not None:
                with contextlib.suppress(OSError):
                    other = os.stat(local_ca)
                    same = (other.st_dev, other.st_ino) == (info.st_dev, info.st_ino)
            if same:
                raise CertificateError(
                    f"refusing to mint: {node_pair} ({name} of {request.directory}) is the CA "
                    f"file {node_ca} under another name; minting would overwrite the cluster CA "
                    f"with the serving pair. Give the pair a directory of its own; nothing was "
                    f"written"
                )


def ensure_certificate(
    request: MintCertificate,
    *,
    root: NodeRoot,
    clock: Clock,
    fault_hook: StepHook | None = None,
    waiting: Callable[[str], None] | None = None,
    cancel: Cancel | None = None,
) -> CertOutcome:
    """Make sure ``request.directory`` holds a good serving pair: reuse it, or mint and write one.

    Node paths are resolved under ``root``; time comes from ``clock.time()``. Raises
    :class:`CertificateError` with a clear message for a bad SAN, an unusable CA, a pair that is
    the CA's own file by another name, a symbolic link where the pair goes, or a failed write
    (``cannot write DIR: No space left on device``; the old pair is then left intact).
    ``fault_hook`` is called before each file-system call of the write (tests inject crashes
    with it).

    A CA that is not valid yet by this node's clock is waited for, up to :data:`CLOCK_WAIT`
    seconds (see :func:`_settled_ca`; ``waiting`` is told when that wait begins, ``cancel`` ends
    it), and the pair is then judged and minted at the time the clock reads after the wait.
    Past the bound, :class:`CANotYetValid` names the CA's notBefore, this node's time and the
    fix, and nothing is written.
    """
    if request.renew_before_days >= LEAF_LIFETIME.days:
        raise CertificateError(
            f"renew_before_days={request.renew_before_days} leaves no time: a new certificate "
            f"lives {LEAF_LIFETIME.days} days; use a smaller renewal window (k3s uses 90)"
        )
    sans = parse_sans(request.sans)
    _refuse_the_ca(request, root=root)  # before the directory is read (stale temps go) or written
    now = _now(clock)
    directory = root.local(request.directory)
    cert_path, key_path = os.path.join(directory, CERT_NAME), os.path.join(directory, KEY_NAME)
    ca = _settled_ca(
        root.local(request.ca_cert),
        root.local(request.ca_key),
        clock=clock,
        waiting=waiting,
        cancel=cancel,
    )
    now = _now(clock)  # looking again (or waiting for the clock) may have taken a while
    verdict = _judge(request, ca, directory=directory, sans=sans, now=now, tidy=True)
    if verdict.reuse:
        assert verdict.cert is not None
        reused = CertOutcome(
            action="reused",
            reason=verdict.reason,
            cert_path=cert_path,
            key_path=key_path,
            not_after=verdict.cert.not_valid_after_utc,
            fingerprint=_fingerprint(verdict.cert),
            key_kept=True,
        )
        _stamp(request, reused, root=root, clock=clock, ca=ca)
        return reused
    key = verdict.key
    files: list[FileSpec] = []
    if key is None:
        key = ec.generate_private_key(ec.SECP256R1())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        # The key goes first, and only when new: a crash before the certificate lands leaves a
        # key that does not match the old certificate, which the next run re-mints.
        files.append(FileSpec(name=KEY_NAME, data=key_pem, mode=KEY_MODE))
    cert = _mint(ca, key, common_name=request.common_name, sans=sans, now=now)
    # Checked as a client checks it before anything is written: a CA whose constraints refuse
    # the leaf fails the step and leaves the pair on disk (good or not) as it was.
    refused = _verify_for_clients(cert, ca.bundle, ca.chain, sans, now=now)
    if refused is not None:
        raise CertificateError(
            f"refusing to mint for {request.directory}: "
            f"{_client_refusal(refused, ca.cert_path, ca.chain, sans)}; nothing was written"
        )
    bundle = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (cert, *ca.bundle))
    files.append(FileSpec(name=CERT_NAME, data=bundle, mode=CERT_MODE))
    try:
        write_files(directory, files, dir_mode=DIR_MODE, step=fault_hook)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise CertificateError(f"{error.filename}: {error.strerror}") from None
        raise CertificateError(
            f"cannot write {directory}: {error.strerror or error}; the previous certificate (if "
            f"any) is left as it was"
        ) from None
    minted = CertOutcome(
        action="minted",
        reason=verdict.reason,
        cert_path=cert_path,
        key_path=key_path,
        not_after=cert.not_valid_after_utc,
        fingerprint=_fingerprint(cert),
        key_kept=len(files) == 1,
    )
    _stamp(request, minted, root=root, clock=clock, ca=ca)
    return minted


def _stamp(
    request: MintCertificate,
    outcome: CertOutcome,
    *,
    root: NodeRoot,
    clock: Clock,
    ca: CertificateAuthority,
) -> None:
    # The next apply may then skip parsing (and importing x509) while nothing changes.
    record_stamp(
        request, outcome, root=root, now=clock.time(), ca_not_after=ca.cert.not_valid_after_utc
    )


# --------------------------------------------------------------------------- inspection


@recordclass.frozen(kw_only=True)
class CertReport:
    """One certificate as ``noderole cert check`` shows it."""

    path: Path
    """The certificate file."""
    common_name: str | None
    """Subject CN."""
    sans: tuple[str, ...]
    """Subject alternative names, as written in the certificate."""
    not_before: dt.datetime
    """Start of validity (UTC)."""
    not_after: dt.datetime
    """End of validity (UTC)."""
    days_left: int
    """Whole days until ``not_after`` (negative once expired)."""
    issuer: str | None
    """Issuer CN (or the whole issuer name when it has no CN)."""
    fingerprint: str
    """SHA-256 fingerprint, lower-case hex."""
    key_checked: bool
    """Whether a sibling key (``X.key`` next to ``X.crt``) was found and checked against it."""
    ca_checked: bool
    """Whether it was checked against a CA certificate."""
    reusable: bool
    """Whether ``cert mint`` would keep it (CN and SANs are not compared: no request is given)."""
    reason: str
    """Why (not)."""
    warning: str = ""
    """Set when ``cert mint`` would keep it but it cannot be renewed: inside the renewal window it
    expires with the CA given (only rotating the CA helps)."""


def inspect_certificate(
    path: Path,
    *,
    ca_cert: Path | None,
    now: dt.datetime,
    renew_before_days: int = 90,
) -> CertReport:
    """Describe the certificate at ``path`` and whether it would be reused against ``ca_cert``.

    The key ``path.with_suffix('.key')`` is checked too when it exists. Raises
    :class:`CertificateError` when ``path`` or ``ca_cert`` cannot be read.
    """
    data = _read(path, "certificate")
    try:
        cert = _load_certificates(data)[0]
    except ValueError as error:
        raise CertificateError(
            f"certificate {path} is not a readable PEM certificate ({error})"
        ) from None
    ca: x509.Certificate | None = None
    bundle: tuple[x509.Certificate, ...] | None = None
    chain: list[x509.Certificate] | None = None
    if ca_cert is not None:
        chain = _ca_certificates(ca_cert)
        ca = chain[0]
        bundle = tuple(c for c in chain if c.issuer != c.subject)
    key_file = path.with_suffix(".key")
    key_pem: bytes | None = None
    key_mode: int | None = None
    if key_file != path and key_file.is_file():
        key_pem = _read(key_file, "key")
        key_mode = stat.S_IMODE(key_file.stat().st_mode)
    verdict = _assess(
        _Existing(cert_pem=data, key_pem=key_pem, key_mode=key_mode),
        ca_cert=ca,
        ca_bundle=bundle,
        ca_chain=chain,
        common_name=None,
        sans=None,
        renew_before_days=renew_before_days,
        now=now,
        check_key=key_pem is not None,
    )
    left = cert.not_valid_after_utc - now
    return CertReport(
        path=path,
        common_name=_common_name(cert.subject),
        sans=tuple(_san_texts(cert)),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        days_left=left.days,
        issuer=_common_name(cert.issuer) or cert.issuer.rfc4514_string(),
        fingerprint=_fingerprint(cert),
        key_checked=key_pem is not None,
        ca_checked=ca is not None,
        reusable=verdict.reuse,
        reason=verdict.reason,
        warning=verdict.warning,
    )


def _san_texts(cert: x509.Certificate) -> list[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    texts = []
    for name in ext:
        if isinstance(name, x509.DNSName | x509.IPAddress):
            texts.append(str(name.value))
        else:
            texts.append(f"{type(name).__name__}:{name.value}")
    return texts


def certificate_fingerprint(path: str | os.PathLike[str]) -> str:
    """The SHA-256 fingerprint of the (first) certificate in ``path``, as a process started
    with it is fingerprinted (:class:`CertOutcome`'s). Raises :class:`CertificateError` when it
    cannot be read or holds no PEM certificate."""
    try:
        return _fingerprint(_load_certificates(_read(path, "certificate"))[0])
    except ValueError as error:
        raise CertificateError(
            f"certificate {path} is not a readable PEM certificate ({error})"
        ) from None


@recordclass.frozen(kw_only=True)
class StepVerdict:
    """What a certificate step would do with the pair on disk now (:func:`judge_step`)."""

    reuse: bool
    """True when the pair would be kept."""
    reason: str
    """Why (not): the re-mint reason, or why the pair is good."""
    warning: str = ""
    """Set when the pair is kept but cannot be renewed: inside its renewal window it expires
    with its CA (``expires in 19 days, together with the CA ...; rotate the cluster CA``)."""


def judge_step(step: MintCertificate, *, root: NodeRoot, now: dt.datetime) -> StepVerdict:
    """Whether ``step``'s certificate on disk would be reused now, and why (the CA loaded and the
    pair read, nothing written, not even a killed writer's temporary files removed): what
    ``apply --dry-run``, ``renew`` and ``cert check --role`` decide by. The pair is read and
    judged by the same functions as :func:`ensure_certificate`'s (its key's mode, owner and
    links, links and FIFOs refused). Raises :class:`CertificateError` when the CA cannot be
    used, a SAN cannot be parsed, or the pair cannot be read (what the step would fail with)."""
    _refuse_the_ca(step, root=root)
    ca = load_ca(root.local(step.ca_cert), root.local(step.ca_key), now=now)
    verdict = _judge(
        step, ca, directory=root.local(step.directory), sans=parse_sans(step.sans), now=now
    )
    return StepVerdict(reuse=verdict.reuse, reason=verdict.reason, warning=verdict.warning)


def step_verdict(step: MintCertificate, *, root: NodeRoot, now: dt.datetime) -> tuple[bool, str]:
    """:func:`judge_step`'s ``(reuse, reason)``."""
    verdict = judge_step(step, root=root, now=now)
    return verdict.reuse, verdict.reason
