"""Mint-or-reuse of the serving pair: what is minted, when it is reused, and crash safety."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import attrs
import click.testing
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from noderole.certs import (
    CA_LOOK_AGAIN,
    CA_SETTLE,
    CertOutcome,
    ensure_certificate,
    inspect_certificate,
    load_ca,
    reuse_verdict,
)
from noderole.clock import FakeClock
from noderole.errors import CertificateError, DefinitionError, UsageError
from noderole.records import MintCertificate
from noderole.root import NodeRoot
from noderole.sans import parse_sans

KONN_DIR = "/var/lib/spinifex-eks/konnectivity"
CA_CERT = "/var/lib/rancher/k3s/server/tls/server-ca.crt"
CA_KEY = "/var/lib/rancher/k3s/server/tls/server-ca.key"
SANS = "konnectivity.example.com,10.0.0.10,::1"
DAY = 86_400.0

CAKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


# --------------------------------------------------------------------------- helpers (shared)


def utc(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def key_pem(key: CAKey, fmt: serialization.PrivateFormat) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_ca(
    name: str = "k3s-server-ca@1700000000",
    *,
    now: float,
    days_before: float = 10,
    days_after: float = 3650,
    key: CAKey | None = None,
    ca: bool = True,
    ski: bool = True,
    signer: tuple[x509.Certificate, CAKey] | None = None,
) -> tuple[x509.Certificate, CAKey]:
    """A CA certificate (self-signed unless ``signer`` is given) and its key."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, issuer_key = (signer[0].subject, signer[1]) if signer else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(utc(now - days_before * DAY))
        .not_valid_after(utc(now + days_after * DAY))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if ski:
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
    if signer:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer[1].public_key()),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256()), key


def openssl_ca(directory: Path, kind: str) -> tuple[Path, Path]:
    """A CA made by the openssl CLI: ``ec-serial0`` (SEC1 key, serial 0, like k3s's),
    ``rsa-pkcs1`` or ``rsa-pkcs8``."""
    directory.mkdir(parents=True, exist_ok=True)
    crt, key = directory / f"{kind}.crt", directory / f"{kind}.key"
    common: list[str | Path] = [
        "-subj", f"/CN={kind}-ca", "-days", "3650", "-nodes",
        "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
    ]  # fmt: skip
    if kind == "ec-serial0":
        raw = directory / "raw.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-set_serial", "0", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:P-256", "-keyout", raw, "-out", crt, *common],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(["openssl", "ec", "-in", raw, "-out", key], check=True, capture_output=True)
        raw.unlink()
    else:
        gen: list[str | Path]
        if kind == "rsa-pkcs1":
            gen = ["openssl", "genrsa", "-traditional", "-out", key, "2048"]
        else:
            gen = ["openssl", "genpkey", "-algorithm", "RSA", "-out", key]
        subprocess.run(gen, check=True, capture_output=True)
        subprocess.run(
            ["openssl", "req", "-x509", "-key", key, "-out", crt, *common],
            check=True, capture_output=True,
        )  # fmt: skip
    return crt, key


@attrs.define
class Node:
    """A scratch node root with a CA installed and a fake clock at real time."""

    path: Path
    clock: FakeClock = attrs.field(factory=lambda: FakeClock(wall=time.time()))

    @property
    def root(self) -> NodeRoot:
        return NodeRoot(self.path)

    @property
    def dir(self) -> Path:
        return self.root.resolve(KONN_DIR)

    @property
    def cert_file(self) -> Path:
        return self.dir / "tls.crt"

    @property
    def key_file(self) -> Path:
        return self.dir / "tls.key"

    def install_ca(self, cert: bytes | x509.Certificate, key: bytes | CAKey) -> None:
        crt_path, key_path = self.root.resolve(CA_CERT), self.root.resolve(CA_KEY)
        crt_path.parent.mkdir(parents=True, exist_ok=True)
        crt_path.write_bytes(cert if isinstance(cert, bytes) else cert_pem(cert))
        key_path.write_bytes(
            key
            if isinstance(key, bytes)
            else key_pem(key, serialization.PrivateFormat.TraditionalOpenSSL)
        )

    def request(self, **overrides: object) -> MintCertificate:
        fields: dict[str, object] = {
            "directory": KONN_DIR,
            "ca_cert": CA_CERT,
            "ca_key": CA_KEY,
            "common_name": "konnectivity-server",
            "sans": (SANS,),
        }
        fields.update(overrides)
        return MintCertificate(**fields)  # type: ignore[arg-type]

    def ensure(self, **overrides: object) -> CertOutcome:
        return ensure_certificate(self.request(**overrides), root=self.root, clock=self.clock)

    def pair(self) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        cert = x509.load_pem_x509_certificates(self.cert_file.read_bytes())[0]
        key = serialization.load_pem_private_key(self.key_file.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cert, key

    def snapshot(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.dir.iterdir())}


class _FinishingClock(FakeClock):
    """A FakeClock whose first sleep lets a writer finish (``finish``): what a real writer does
    while a step waits to look again."""

    finish: Any = None

    def sleep(self, seconds: float) -> None:
        if self.finish is not None:
            finish, self.finish = self.finish, None
            finish()
        super().sleep(seconds)


def assert_sound_pair(node: Node, ca: x509.Certificate, sans: str = SANS) -> None:
    """The pair in ``node`` matches, was issued by ``ca``, and holds exactly ``sans``."""
    cert, key = node.pair()
    assert key.public_key() == cert.public_key()
    cert.verify_directly_issued_by(ca)
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    found = {str(v) for v in ext.get_values_for_type(x509.DNSName)} | {
        str(v) for v in ext.get_values_for_type(x509.IPAddress)
    }
    assert found == {s.value for s in parse_sans(sans)}
    assert [p.name for p in node.dir.iterdir() if p.name.endswith(".tmp")] == []


@pytest.fixture
def node(tmp_path: Path) -> Node:
    """A node root holding a fresh EC CA valid for ten years."""
    result = Node(tmp_path / "root")
    cert, key = make_ca(now=result.clock.time())
    result.install_ca(cert, key)
    return result


def ca_of(node: Node) -> x509.Certificate:
    return x509.load_pem_x509_certificate(node.root.resolve(CA_CERT).read_bytes())


# --------------------------------------------------------------------------- tests


class TestMint:
    def test_first_run_mints(self, node: Node) -> None:
        """With no pair in place, a pair is minted and the reason says so."""
        outcome = node.ensure()
        assert outcome.action == "minted"
        assert outcome.reason == "no existing certificate"
        assert not outcome.key_kept
        assert outcome.cert_path == node.cert_file
        assert outcome.key_path == node.key_file
        assert_sound_pair(node, ca_of(node))

    def test_leaf_contents(self, node: Node) -> None:
        """The leaf: P-256 key, CN, random serial, 365 days from an hour ago, serving extensions."""
        outcome = node.ensure()
        cert, key = node.pair()
        now = utc(int(node.clock.time()))
        assert isinstance(key.curve, ec.SECP256R1)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
            "konnectivity-server"
        )
        assert cert.serial_number > 0
        assert cert.not_valid_before_utc == now - dt.timedelta(hours=1)
        assert cert.not_valid_after_utc == now - dt.timedelta(hours=1) + dt.timedelta(days=365)
        assert outcome.not_after == cert.not_valid_after_utc
        ext = cert.extensions
        bc = ext.get_extension_for_class(x509.BasicConstraints)
        assert bc.critical
        assert not bc.value.ca
        ku = ext.get_extension_for_class(x509.KeyUsage)
        assert ku.critical
        assert ku.value.digital_signature
        assert not ku.value.key_cert_sign
        assert not ku.value.key_encipherment
        eku = ext.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
        ski = ext.get_extension_for_class(x509.SubjectKeyIdentifier).value
        assert ski == x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        aki = ext.get_extension_for_class(x509.AuthorityKeyIdentifier).value
        ca_ski = ca_of(node).extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        assert aki.key_identifier == ca_ski.digest
        assert outcome.fingerprint == cert.fingerprint(hashes.SHA256()).hex()

    def test_serials_differ(self, node: Node) -> None:
        """Each mint uses a fresh random serial number."""
        node.ensure()
        first = node.pair()[0].serial_number
        node.ensure(sans=("other.example",))
        assert node.pair()[0].serial_number != first

    def test_modes(self, node: Node) -> None:
        """Key 0600, certificate 0644, a directory it creates 0700."""
        old = os.umask(0o022)
        try:
            node.ensure()
        finally:
            os.umask(old)
        assert node.key_file.stat().st_mode & 0o777 == 0o600
        assert node.cert_file.stat().st_mode & 0o777 == 0o644
        assert node.dir.stat().st_mode & 0o777 == 0o700

    def test_existing_directory_mode_kept(self, node: Node) -> None:
        """An existing directory keeps its mode (the key's own 0600 protects it)."""
        node.dir.mkdir(parents=True)
        node.dir.chmod(0o755)
        node.ensure()
        assert node.dir.stat().st_mode & 0o777 == 0o755

    def test_not_before_clamped_to_ca(self, tmp_path: Path) -> None:
        """A CA made minutes ago bounds the leaf's start (never before the CA's)."""
        node = Node(tmp_path)
        ca, key = make_ca(now=node.clock.time(), days_before=10 / (24 * 60))
        node.install_ca(ca, key)
        node.ensure()
        assert node.pair()[0].not_valid_before_utc == ca.not_valid_before_utc

    def test_not_after_capped_by_ca(self, tmp_path: Path) -> None:
        """A leaf never outlives its CA."""
        node = Node(tmp_path)
        ca, key = make_ca(now=node.clock.time(), days_after=200)
        node.install_ca(ca, key)
        node.ensure()
        assert node.pair()[0].not_valid_after_utc == ca.not_valid_after_utc

    def test_aki_from_public_key_without_ca_ski(self, tmp_path: Path) -> None:
        """A CA without a subject key identifier still yields an AKI, from its public key."""
        node = Node(tmp_path)
        ca, key = make_ca(now=node.clock.time(), ski=False)
        node.install_ca(ca, key)
        node.ensure()
        aki = node.pair()[0].extensions.get_extension_for_class(x509.AuthorityKeyIdentifier)
        assert aki.value == x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key())

    def test_bad_san_refused_before_anything_written(self, node: Node) -> None:
        """A bad SAN is refused when the step is built, with the entry named; nothing written."""
        with pytest.raises(DefinitionError, match=r"field 'sans' .*'api\.example:443'"):
            node.ensure(sans=("a.example,api.example:443",))
        assert not node.dir.exists()

    def test_empty_sans_refused(self, node: Node) -> None:
        """An empty SAN list (the seed's 'EKS_KONNECTIVITY_SANS empty') fails clearly."""
        with pytest.raises(DefinitionError, match="no SANs given"):
            node.ensure(sans=(" , ",))

    def test_window_longer_than_lifetime_refused(self, node: Node) -> None:
        """A renewal window as long as a certificate's life is refused (it would always re-mint)."""
        with pytest.raises(DefinitionError, match="field 'renew_before_days'"):
            node.ensure(renew_before_days=365)


class TestCertificateAuthority:
    @pytest.mark.parametrize("kind", ["ec-serial0", "rsa-pkcs1", "rsa-pkcs8"])
    def test_openssl_made_cas(self, tmp_path: Path, kind: str) -> None:
        """CAs made by openssl work: EC SEC1 with serial 0 (like k3s), RSA PKCS#1 and PKCS#8."""
        crt, key = openssl_ca(tmp_path / "ca", kind)
        header = key.read_text().splitlines()[0]
        expected = {
            "ec-serial0": "-----BEGIN EC PRIVATE KEY-----",
            "rsa-pkcs1": "-----BEGIN RSA PRIVATE KEY-----",
            "rsa-pkcs8": "-----BEGIN PRIVATE KEY-----",
        }
        assert header == expected[kind]
        node = Node(tmp_path / "root")
        node.install_ca(crt.read_bytes(), key.read_bytes())
        assert node.ensure().action == "minted"
        assert node.ensure().action == "reused"
        with pytest.warns(CryptographyDeprecationWarning) if kind == "ec-serial0" else _nothing():
            ca = x509.load_pem_x509_certificate(crt.read_bytes())
        assert_sound_pair(node, ca)

    def test_pkcs8_ec_key(self, tmp_path: Path) -> None:
        """An EC CA key in PKCS#8 form works."""
        node = Node(tmp_path)
        ca, key = make_ca(now=node.clock.time())
        node.install_ca(ca, key_pem(key, serialization.PrivateFormat.PKCS8))
        assert node.ensure().action == "minted"

    def test_chain_file_signer_first(self, tmp_path: Path) -> None:
        """In a CA file holding a chain the first certificate signs; intermediates are served."""
        node = Node(tmp_path)
        now = node.clock.time()
        root_ca = make_ca("root-ca", now=now)
        inter, inter_key = make_ca("intermediate-ca", now=now, signer=root_ca)
        node.install_ca(cert_pem(inter) + cert_pem(root_ca[0]), inter_key)
        node.ensure()
        served = x509.load_pem_x509_certificates(node.cert_file.read_bytes())
        assert [c.subject for c in served[1:]] == [inter.subject]
        served[0].verify_directly_issued_by(inter)
        assert node.ensure().action == "reused"

    def test_key_not_matching(self, node: Node) -> None:
        """A CA key that does not match the CA certificate is refused, naming the key file."""
        other = ec.generate_private_key(ec.SECP256R1())
        node.install_ca(ca_of(node), other)
        with pytest.raises(CertificateError, match=r"server-ca\.key does not match") as info:
            node.ensure()
        assert str(node.root.resolve(CA_CERT)) in str(info.value)

    def test_expired_ca(self, tmp_path: Path) -> None:
        """An expired CA is refused, naming the file."""
        node = Node(tmp_path)
        node.install_ca(*make_ca(now=node.clock.time(), days_before=400, days_after=-1))
        with pytest.raises(CertificateError, match=r"server-ca\.crt expired on"):
            node.ensure()

    def test_not_yet_valid_ca(self, tmp_path: Path) -> None:
        """A CA not valid yet (a clock behind that nothing sets) is refused once the mint has
        waited for the clock (on the fake clock, at once), naming the file and the clock."""
        node = Node(tmp_path)
        node.install_ca(*make_ca(now=node.clock.time(), days_before=-1))
        with pytest.raises(CertificateError, match=r"server-ca\.crt is not valid until .*clock"):
            node.ensure()

    def test_non_ca_certificate(self, tmp_path: Path) -> None:
        """A certificate without BasicConstraints CA:TRUE is refused, naming the file."""
        node = Node(tmp_path)
        node.install_ca(*make_ca(now=node.clock.time(), ca=False))
        with pytest.raises(CertificateError, match=r"server-ca\.crt is not a CA"):
            node.ensure()

    def test_missing_ca(self, node: Node) -> None:
        """A missing CA file is named."""
        node.root.resolve(CA_KEY).unlink()
        with pytest.raises(CertificateError, match=r"CA key .*server-ca\.key does not exist"):
            node.ensure()

    def test_a_ca_still_being_written_is_read_again_until_whole(self, tmp_path: Path) -> None:
        """k3s writes its CA as client-go's cert.WriteCert does (create, then write), and a path
        wait ends on the create: the step may find the certificate or the key half-written. A CA
        file that does not parse and was written in the last CA_SETTLE seconds is read again
        (every CA_LOOK_AGAIN) until it parses; here the writer finishes during the first look."""
        node = Node(tmp_path, clock=_FinishingClock(wall=time.time()))
        cert, key = make_ca(now=node.clock.time())
        node.install_ca(cert, key)
        key_path = node.root.resolve(CA_KEY)
        whole = key_path.read_bytes()
        key_path.write_bytes(whole[: len(whole) // 2])  # the writer is half-way
        os.utime(key_path, (node.clock.time(), node.clock.time()))
        node.clock.finish = lambda: key_path.write_bytes(whole)  # type: ignore[attr-defined]
        before = node.clock.monotonic()
        outcome = node.ensure()
        assert outcome.action == "minted"
        assert 0 < node.clock.monotonic() - before <= CA_SETTLE
        assert_sound_pair(node, cert)

    def test_a_ca_that_stays_broken_fails_once_it_has_settled(self, tmp_path: Path) -> None:
        """A young CA file that never parses is looked at for CA_SETTLE seconds at most, then
        fails with the same message as at once."""
        node = Node(tmp_path)
        node.install_ca(*make_ca(now=node.clock.time()))
        path = node.root.resolve(CA_CERT)
        path.write_text("-----BEGIN CERTIFICATE-----\nMIIB")  # a writer that died half-way
        os.utime(path, (node.clock.time(), node.clock.time()))
        before = node.clock.monotonic()
        with pytest.raises(CertificateError, match=r"server-ca\.crt holds no readable PEM"):
            node.ensure()
        assert CA_SETTLE <= node.clock.monotonic() - before <= CA_SETTLE + CA_LOOK_AGAIN

    def test_an_old_broken_ca_fails_at_once(self, tmp_path: Path) -> None:
        """CA files written more than CA_SETTLE seconds ago are not being written: no look again."""
        node = Node(tmp_path)
        node.install_ca(*make_ca(now=node.clock.time()))
        path = node.root.resolve(CA_CERT)
        path.write_text("not a certificate\n")
        old = node.clock.time() - 60
        for written in (path, node.root.resolve(CA_KEY)):
            os.utime(written, (old, old))
        before = node.clock.monotonic()
        with pytest.raises(CertificateError, match=r"server-ca\.crt holds no readable PEM"):
            node.ensure()
        assert node.clock.monotonic() == before

    def test_garbage_ca(self, node: Node) -> None:
        """A CA file with no PEM certificate is named."""
        node.root.resolve(CA_CERT).write_text("not a certificate\n")
        with pytest.raises(CertificateError, match=r"server-ca\.crt holds no readable PEM"):
            node.ensure()

    def test_encrypted_key(self, node: Node) -> None:
        """An encrypted CA key is refused with a clear message."""
        key = ec.generate_private_key(ec.SECP256R1())
        ca, _ = make_ca(now=node.clock.time(), key=key)
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
        node.install_ca(ca, pem)
        with pytest.raises(CertificateError, match="is encrypted"):
            node.ensure()

    def test_unsupported_key_type(self, tmp_path: Path) -> None:
        """A CA key that is neither EC nor RSA is refused, naming the file."""
        from cryptography.hazmat.primitives.asymmetric import ed25519

        node = Node(tmp_path)
        key = ed25519.Ed25519PrivateKey.generate()
        node.root.resolve(CA_KEY).parent.mkdir(parents=True)
        node.root.resolve(CA_KEY).write_bytes(key_pem(key, serialization.PrivateFormat.PKCS8))  # type: ignore[arg-type]
        ca, _ = make_ca(now=node.clock.time())
        node.root.resolve(CA_CERT).write_bytes(cert_pem(ca))
        with pytest.raises(CertificateError) as info:
            node.ensure()
        assert str(info.value) == (
            f"CA key {node.root.resolve(CA_KEY)} is of type Ed25519; only EC and RSA CA keys are "
            "supported (k3s makes an EC P-256 key)"
        )

    @pytest.mark.parametrize("form", ["DER", "empty"])
    def test_a_key_that_is_not_pem_says_how_to_convert_it(self, node: Node, form: str) -> None:
        """A DER key (the same key, another encoding) said only "not a readable PEM private key
        (... MalformedFraming)": the message gives the openssl command that converts it. An
        empty file says it is empty."""
        path = node.root.resolve(CA_KEY)
        pem = path.read_bytes()
        path.write_bytes(b"")
        if form == "DER":
            subprocess.run(
                ["openssl", "ec", "-outform", "DER", "-out", path],
                input=pem,
                check=True,
                capture_output=True,
            )
        with pytest.raises(CertificateError) as info:
            node.ensure()
        if form == "DER":
            assert f"CA key {path} is not a readable PEM private key (" in str(info.value)
            assert str(info.value).endswith(
                f"it is not PEM (DER?): convert it with `openssl pkey -inform DER -in {path} "
                f"-out {path}.pem` and point ca_key at the .pem file"
            )
            converted = path.with_name(path.name + ".pem")
            subprocess.run(
                ["openssl", "pkey", "-inform", "DER", "-in", path, "-out", converted],
                check=True,
                capture_output=True,
            )
            assert node.ensure(ca_key=CA_KEY + ".pem").action == "minted"  # the advice works
        else:
            assert str(info.value) == (
                f"CA key {path} is empty; point ca_key at the cluster CA's private key (PEM)"
            )

    def test_a_ca_that_may_not_sign_says_what_to_give(self, tmp_path: Path) -> None:
        """A certificate that is a CA but lacks keyCertSign: the message says what to use."""
        node = Node(tmp_path)
        ca, key = make_ca(now=node.clock.time())
        builder = x509.CertificateBuilder(
            issuer_name=ca.issuer,
            subject_name=ca.subject,
            public_key=key.public_key(),
            serial_number=ca.serial_number,
            not_valid_before=ca.not_valid_before_utc,
            not_valid_after=ca.not_valid_after_utc,
        )
        for extension in ca.extensions:
            value = extension.value
            if isinstance(value, x509.KeyUsage):
                value = x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=False,
                    crl_sign=False, encipher_only=False, decipher_only=False,
                )  # fmt: skip
            builder = builder.add_extension(value, extension.critical)
        node.install_ca(builder.sign(key, hashes.SHA256()), key)
        with pytest.raises(CertificateError) as info:
            node.ensure()
        assert str(info.value) == (
            f"CA certificate {node.root.resolve(CA_CERT)} is not allowed to sign certificates "
            "(its KeyUsage lacks keyCertSign); point ca_cert at the cluster CA that signs serving "
            "certificates (k3s: server-ca.crt), or re-issue the CA with keyUsage keyCertSign"
        )

    def test_a_chain_with_the_signer_second_says_to_put_it_first(self, tmp_path: Path) -> None:
        """The root first and the intermediate (whose key is given) second said only "does not
        match": the message names the certificate the key matches and the order to use."""
        node = Node(tmp_path)
        now = node.clock.time()
        root_ca = make_ca("root-ca", now=now)
        inter, inter_key = make_ca("intermediate-ca", now=now, signer=root_ca)
        node.install_ca(cert_pem(root_ca[0]) + cert_pem(inter), inter_key)
        with pytest.raises(CertificateError) as info:
            node.ensure()
        path = node.root.resolve(CA_CERT)
        assert str(info.value) == (
            f"CA key {node.root.resolve(CA_KEY)} matches certificate 2 of {path} "
            "(CN=intermediate-ca), not the first: the signing certificate must come first in "
            "the CA file; put that certificate first"
        )


class _nothing:
    """A context manager that does nothing (stands in for pytest.warns)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None


class TestReuse:
    def test_reused_untouched(self, node: Node) -> None:
        """A good pair is reused: same fingerprint, the files are not rewritten."""
        first = node.ensure()
        inodes = (node.cert_file.stat().st_ino, node.key_file.stat().st_ino)
        node.clock.advance(100 * DAY)
        second = node.ensure()
        assert second.action == "reused"
        assert second.key_kept
        assert second.fingerprint == first.fingerprint
        assert second.reason.endswith("(264 days left)")
        assert (node.cert_file.stat().st_ino, node.key_file.stat().st_ino) == inodes

    def test_renewal_window_keeps_key(self, node: Node) -> None:
        """Inside the renewal window the certificate is re-minted and the key kept."""
        node.ensure()
        old_key = node.key_file.read_bytes()
        node.clock.advance(353 * DAY)
        outcome = node.ensure()
        assert outcome.action == "minted"
        assert outcome.reason == "expires in 11 days (renewal window 90 days)"
        assert outcome.key_kept
        assert node.key_file.read_bytes() == old_key
        assert_sound_pair(node, ca_of(node))

    def test_custom_window(self, node: Node) -> None:
        """renew_before_days sets the window."""
        node.ensure(renew_before_days=10)
        node.clock.advance(300 * DAY)
        assert node.ensure(renew_before_days=10).action == "reused"
        assert node.ensure(renew_before_days=70).reason.startswith("expires in 64 days")

    def test_expired(self, node: Node) -> None:
        """An expired certificate is re-minted and the reason names the date."""
        node.ensure()
        node.clock.advance(400 * DAY)
        assert node.ensure().reason.startswith("expired on ")

    def test_not_yet_valid(self, node: Node) -> None:
        """A certificate from the future (clock went back) is re-minted."""
        node.ensure()
        node.clock = FakeClock(wall=node.clock.time() - 2 * DAY)  # the clock was stepped back
        assert node.ensure().reason.startswith("not valid until ")

    def test_capped_by_ca_reused(self, tmp_path: Path) -> None:
        """A leaf expiring with its CA is reused in the window: a new one could not last longer."""
        node = Node(tmp_path)
        node.install_ca(*make_ca(now=node.clock.time(), days_after=60))
        node.ensure()
        outcome = node.ensure()
        assert outcome.action == "reused"
        assert "together with the CA" in outcome.reason

    def test_a_leaf_past_its_reissued_ca_is_reminted(self, tmp_path: Path) -> None:
        """A CA issued again with the same key and name but to expire sooner: the leaf's
        signature still verifies, but no client accepts it past the CA's expiry. It is
        re-minted, capped at the CA's expiry (the mint never goes past it)."""
        node = Node(tmp_path)
        ca, key = make_ca(now=node.clock.time())
        node.install_ca(ca, key)
        node.ensure()
        sooner, _ = make_ca(now=node.clock.time(), days_after=200, key=key)
        node.install_ca(sooner, key)
        outcome = node.ensure()
        assert outcome.action == "minted"
        assert outcome.key_kept
        assert outcome.reason.startswith("valid until ")
        assert f"past its CA's expiry on {sooner.not_valid_after_utc:%Y-%m-%d}" in outcome.reason
        assert "the CA itself expires" not in outcome.reason  # 200 days: outside the window
        assert node.pair()[0].not_valid_after_utc == sooner.not_valid_after_utc
        assert node.ensure().action == "reused"

    def test_sans_changed(self, node: Node) -> None:
        """Added and removed SANs are both named, in the request's order and sorted."""
        node.ensure()
        outcome = node.ensure(sans=("konnectivity.example.com,b.example,::1,a.example",))
        assert outcome.action == "minted"
        assert outcome.reason == "SANs changed: +b.example +a.example -10.0.0.10"
        assert outcome.key_kept

    def test_san_order_and_spelling_do_not_matter(self, node: Node) -> None:
        """The same SAN set in another order and spelling is reused."""
        node.ensure()
        again = node.ensure(sans=("[0::1], KONNECTIVITY.example.com., 10.0.0.10",))
        assert again.action == "reused"

    def test_common_name_changed(self, node: Node) -> None:
        """A different CN forces a re-mint."""
        node.ensure()
        outcome = node.ensure(common_name="other")
        assert outcome.reason == "common name changed: 'konnectivity-server' -> 'other'"

    def test_rotated_ca_same_name(self, node: Node) -> None:
        """A CA rotated under the same name forces a re-mint (the signature no longer verifies)."""
        node.ensure()
        old = ca_of(node)
        node.install_ca(*make_ca(old.subject.rfc4514_string()[3:], now=node.clock.time()))
        assert ca_of(node).subject == old.subject
        outcome = node.ensure()
        assert outcome.reason == "issued by a different CA (signature does not verify)"
        assert outcome.key_kept
        assert_sound_pair(node, ca_of(node))

    def test_other_ca_name(self, node: Node) -> None:
        """A CA with another name forces a re-mint naming both issuers."""
        node.ensure()
        node.install_ca(*make_ca("another-ca", now=node.clock.time()))
        reason = node.ensure().reason
        assert reason.startswith("issued by a different CA (issuer 'CN=k3s-server-ca@")
        assert "CA is 'CN=another-ca'" in reason

    def test_no_key(self, node: Node) -> None:
        """A certificate without its key is re-minted with a new key."""
        node.ensure()
        node.key_file.unlink()
        outcome = node.ensure()
        assert (outcome.reason, outcome.key_kept) == ("no existing key", False)
        assert_sound_pair(node, ca_of(node))

    def test_key_mismatch(self, node: Node) -> None:
        """A key that does not match the certificate is replaced along with it."""
        node.ensure()
        other = ec.generate_private_key(ec.SECP256R1())
        node.key_file.write_bytes(key_pem(other, serialization.PrivateFormat.PKCS8))
        outcome = node.ensure()
        assert outcome.reason == "the existing key does not match the certificate"
        assert not outcome.key_kept
        assert_sound_pair(node, ca_of(node))

    def test_unreadable_files(self, node: Node) -> None:
        """Garbage in either file forces a re-mint naming which one."""
        node.ensure()
        node.key_file.write_bytes(b"junk")
        assert node.ensure().reason == "the existing key is unreadable"
        node.cert_file.write_bytes(b"junk")
        assert node.ensure().reason == "the existing certificate is unreadable"
        assert_sound_pair(node, ca_of(node))

    def test_loose_key_mode(self, node: Node) -> None:
        """A key readable by others is not trusted: a new key and certificate are minted."""
        node.ensure()
        old_key = node.key_file.read_bytes()
        node.key_file.chmod(0o644)
        outcome = node.ensure()
        assert outcome.reason == "the existing key is readable by others (mode 0644)"
        assert not outcome.key_kept
        assert node.key_file.read_bytes() != old_key
        assert node.key_file.stat().st_mode & 0o777 == 0o600

    def _plant_leaf(self, node: Node, *, ca: bool, eku: bool) -> None:
        """Replace tls.crt with a leaf for the same key and names but other extensions."""
        node.ensure()
        cert, key = node.pair()
        ca_key = serialization.load_pem_private_key(
            node.root.resolve(CA_KEY).read_bytes(), password=None
        )
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        builder = (
            x509.CertificateBuilder()
            .subject_name(cert.subject)
            .issuer_name(cert.issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(cert.not_valid_before_utc)
            .not_valid_after(cert.not_valid_after_utc)
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(
                cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value,
                critical=False,
            )
        )
        if eku:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
        node.cert_file.write_bytes(cert_pem(builder.sign(ca_key, hashes.SHA256())))

    def test_ca_leaf_remints(self, node: Node) -> None:
        """An existing certificate that is a CA is not reused as a serving leaf."""
        self._plant_leaf(node, ca=True, eku=True)
        assert node.ensure().reason == (
            "the existing certificate is a CA certificate, not a serving leaf"
        )

    def test_missing_server_auth_remints(self, node: Node) -> None:
        """An existing certificate without serverAuth is re-minted."""
        self._plant_leaf(node, ca=False, eku=False)
        assert node.ensure().reason == (
            "the existing certificate has no extended key usage serverAuth"
        )

    def test_reuse_verdict_function(self, node: Node) -> None:
        """reuse_verdict answers for PEM bytes directly."""
        node.ensure()
        now = utc(node.clock.time())
        ca = load_ca(node.root.resolve(CA_CERT), node.root.resolve(CA_KEY), now=now)
        sans = parse_sans(SANS)
        cert_bytes, key_bytes = node.cert_file.read_bytes(), node.key_file.read_bytes()
        args = {"ca": ca, "common_name": "konnectivity-server", "renew_before_days": 90}
        assert reuse_verdict(cert_bytes, key_bytes, sans=sans, now=now, **args)[0]  # type: ignore[arg-type]
        assert reuse_verdict(None, key_bytes, sans=sans, now=now, **args) == (  # type: ignore[arg-type]
            False,
            "no existing certificate",
        )
        verdict = reuse_verdict(cert_bytes, key_bytes, sans=sans[:1], now=now, **args)  # type: ignore[arg-type]
        assert verdict == (False, "SANs changed: -10.0.0.10 -::1")


class TestInspect:
    def test_report(self, node: Node) -> None:
        """inspect_certificate reports subject, SANs, expiry, issuer, and the reuse verdict."""
        node.ensure()
        report = inspect_certificate(
            node.cert_file, ca_cert=node.root.resolve(CA_CERT), now=utc(node.clock.time())
        )
        assert report.common_name == "konnectivity-server"
        assert report.sans == ("konnectivity.example.com", "10.0.0.10", "::1")
        assert report.issuer == "k3s-server-ca@1700000000"
        assert report.days_left == 364
        assert report.key_checked
        assert report.ca_checked
        assert report.reusable

    def test_report_against_other_ca(self, node: Node, tmp_path: Path) -> None:
        """Against another CA the verdict is no, with the reason."""
        node.ensure()
        other = tmp_path / "other.crt"
        other.write_bytes(cert_pem(make_ca("k3s-server-ca@1700000000", now=node.clock.time())[0]))
        report = inspect_certificate(node.cert_file, ca_cert=other, now=utc(node.clock.time()))
        assert not report.reusable
        assert report.reason == "issued by a different CA (signature does not verify)"

    def test_a_leaf_expiring_with_its_ca_in_the_window_is_flagged(self, tmp_path: Path) -> None:
        """Reusable (the mint keeps it), but it cannot be renewed: the report warns, naming the
        CA and its rotation; without the CA it is simply due."""
        node = Node(tmp_path)
        node.install_ca(*make_ca(now=node.clock.time(), days_after=20))
        node.ensure()
        now = utc(node.clock.time())
        report = inspect_certificate(node.cert_file, ca_cert=node.root.resolve(CA_CERT), now=now)
        assert report.reusable
        assert report.warning.startswith("expires in 19 days, together with the CA (on ")
        assert report.warning.endswith(
            "; rotate the cluster CA (k3s certificate rotate-ca), then renew"
        )
        alone = inspect_certificate(node.cert_file, ca_cert=None, now=now)
        assert (alone.reusable, alone.warning) == (False, "")

    def test_unreadable(self, tmp_path: Path) -> None:
        """An unreadable certificate raises a CertificateError naming it."""
        path = tmp_path / "x.crt"
        path.write_text("junk")
        with pytest.raises(CertificateError, match=r"x\.crt is not a readable PEM"):
            inspect_certificate(path, ca_cert=None, now=utc(time.time()))


class TestSymlinks:
    @pytest.mark.parametrize("name", ["tls.key", "tls.crt"])
    def test_planted_file_link_refused(self, node: Node, tmp_path: Path, name: str) -> None:
        """A symbolic link planted at tls.key or tls.crt is refused; its target is untouched."""
        node.ensure()
        victim = tmp_path / "victim"
        victim.write_bytes(b"precious")
        (node.dir / name).unlink()
        (node.dir / name).symlink_to(victim)
        with pytest.raises(CertificateError, match=rf"refusing to use .*{name}: it is a symbolic"):
            node.ensure()
        assert victim.read_bytes() == b"precious"
        assert (node.dir / name).is_symlink()

    def test_planted_directory_link_refused(self, node: Node, tmp_path: Path) -> None:
        """A symbolic link planted as the directory is refused and nothing is written through it."""
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        node.dir.parent.mkdir(parents=True)
        node.dir.symlink_to(elsewhere)
        with pytest.raises(CertificateError, match="it is a symbolic link"):
            node.ensure()
        assert list(elsewhere.iterdir()) == []

    def test_link_planted_during_write_refused(self, node: Node, tmp_path: Path) -> None:
        """A link that appears after the pair was read is still refused before the rename."""
        node.ensure()
        node.clock.advance(300 * DAY)
        victim = tmp_path / "victim"
        victim.write_bytes(b"precious")

        def plant(step: str) -> None:
            if step == "tls.crt:write":
                node.cert_file.unlink()
                node.cert_file.symlink_to(victim)

        with pytest.raises(
            CertificateError, match=r"tls\.crt: refusing to write through a symbolic link"
        ):
            ensure_certificate(node.request(), root=node.root, clock=node.clock, fault_hook=plant)
        assert victim.read_bytes() == b"precious"
        assert [p.name for p in node.dir.iterdir() if p.name.endswith(".tmp")] == []

    def test_link_planted_at_rename_replaced_not_followed(self, node: Node, tmp_path: Path) -> None:
        """A link that appears in the last instant is replaced by the rename, never followed."""
        node.ensure()
        node.clock.advance(300 * DAY)
        victim = tmp_path / "victim"
        victim.write_bytes(b"precious")

        def plant(step: str) -> None:
            if step == "tls.crt:rename":
                node.cert_file.unlink()
                node.cert_file.symlink_to(victim)

        ensure_certificate(node.request(), root=node.root, clock=node.clock, fault_hook=plant)
        assert victim.read_bytes() == b"precious"
        assert not node.cert_file.is_symlink()
        assert_sound_pair(node, ca_of(node))


class Crash(Exception):
    """Injected by the fault hook."""


CRASH_EXIT = 75


def _prepare(kind: str, node: Node) -> None:
    """Put ``node`` in the state before the interrupted run."""
    if kind == "fresh":
        return
    node.ensure()
    if kind == "renewal":
        node.clock.advance(300 * DAY)
    elif kind == "new-key":
        node.key_file.chmod(0o640)


def _steps(kind: str, base: Path, ca: tuple[x509.Certificate, CAKey]) -> list[str]:
    node = Node(base / "record")
    node.install_ca(*ca)
    _prepare(kind, node)
    names: list[str] = []
    ensure_certificate(node.request(), root=node.root, clock=node.clock, fault_hook=names.append)
    return names


def _run_interrupted(node: Node, index: int, how: str) -> None:
    """Run ensure_certificate and interrupt it at boundary ``index``: raise, or die (os._exit)."""
    seen = 0

    def hook(name: str) -> None:
        nonlocal seen
        if seen == index:
            if how == "exit":
                os._exit(CRASH_EXIT)
            raise Crash(name)
        seen += 1

    if how == "raise":
        with pytest.raises(Crash):
            ensure_certificate(node.request(), root=node.root, clock=node.clock, fault_hook=hook)
        return
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child dies at the hook
        try:
            ensure_certificate(node.request(), root=node.root, clock=node.clock, fault_hook=hook)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == CRASH_EXIT


class TestCrashSafety:
    @pytest.mark.parametrize("how", ["raise", "exit"])
    @pytest.mark.parametrize("kind", ["fresh", "renewal", "new-key"])
    def test_interrupted_at_every_step(self, tmp_path: Path, kind: str, how: str) -> None:
        """Interrupted at any system-call boundary, the next run leaves a sound pair."""
        clock_start = time.time()
        ca = make_ca(now=clock_start)
        steps = _steps(kind, tmp_path, ca)
        assert len(steps) >= 8
        for index, step in enumerate(steps):
            node = Node(tmp_path / f"{index}", clock=FakeClock(wall=clock_start))
            node.install_ca(*ca)
            _prepare(kind, node)
            before = node.snapshot() if node.dir.exists() else {}
            _run_interrupted(node, index, how)
            after = node.snapshot() if node.dir.exists() else {}
            if how == "raise":
                assert not [n for n in after if n.endswith(".tmp")], step
            finished = {n: d for n, d in after.items() if not n.endswith(".tmp")}
            if kind == "renewal":
                # Only the certificate is replaced, atomically: a sound pair at every instant.
                cert, key = node.pair()
                assert key.public_key() == cert.public_key(), step
                cert.verify_directly_issued_by(ca[0])
            elif not any(s.endswith(":rename") for s in steps[:index]):
                # Nothing renamed yet: the old pair (or nothing) is there, byte for byte.
                assert finished == before, step
            outcome = node.ensure()
            assert_sound_pair(node, ca[0])
            assert node.ensure().action == "reused", (step, outcome)


def _unshare_works() -> str | None:
    """None when a private mount namespace can be made here, else why not."""
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"unshare -m refused: {probe.stderr.strip()}"
    return None


_FS_SNIPPET = textwrap.dedent(
    """
    import json, os, subprocess, sys
    from pathlib import Path
    from noderole.certs import ensure_certificate
    from noderole.clock import FakeClock
    from noderole.errors import CertificateError, UsageError
    from noderole.records import MintCertificate
    from noderole.root import NodeRoot

    root, how, wall = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    target = root / "var/lib/spinifex-eks/konnectivity"
    target.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12k,mode=0700", "tmpfs", str(target)],
                   check=True)
    request = MintCertificate(directory="/var/lib/spinifex-eks/konnectivity",
        ca_cert="/var/lib/rancher/k3s/server/tls/server-ca.crt",
        ca_key="/var/lib/rancher/k3s/server/tls/server-ca.key",
        common_name="konnectivity-server", sans=("a.example,10.0.0.1",))
    clock = FakeClock(wall=wall)
    ensure_certificate(request, root=NodeRoot(root), clock=clock)
    before = {n: (target / n).read_bytes().hex() for n in ("tls.crt", "tls.key")}
    if how == "enospc":
        fd = os.open(target / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"x" * 512)
        except OSError:
            pass
        finally:
            os.close(fd)
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(target)], check=True)
    clock.advance(300 * 86400)
    try:
        ensure_certificate(request, root=NodeRoot(root), clock=clock)
        error = None
    except CertificateError as exc:
        error = str(exc)
    after = {n: (target / n).read_bytes().hex() for n in ("tls.crt", "tls.key")}
    print(json.dumps({"error": error, "intact": before == after,
                      "listing": sorted(os.listdir(target))}))
    """
)


class TestFileSystemErrors:
    @pytest.mark.parametrize(
        ("how", "words"),
        [("enospc", "No space left on device"), ("readonly", "Read-only file system")],
    )
    def test_real_write_failure_keeps_old_pair(self, tmp_path: Path, how: str, words: str) -> None:
        """On a full or read-only file system the error names the directory; the old pair stays."""
        why = _unshare_works()
        if why:
            pytest.skip(why)
        node = Node(tmp_path / "root")
        node.install_ca(*make_ca(now=node.clock.time()))
        out = subprocess.run(
            ["unshare", "-m", "--propagation", "private", sys.executable, "-c", _FS_SNIPPET,
             str(node.path), how, str(node.clock.time())],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert result["error"] == (
            f"cannot write {node.dir}: {words}; the previous certificate (if any) is left as it was"
        )
        assert result["intact"]
        expected = ["filler", "tls.crt", "tls.key"] if how == "enospc" else ["tls.crt", "tls.key"]
        assert result["listing"] == expected


class TestCli:
    def _invoke(self, node: Node, args: list[str]) -> click.testing.Result:
        from noderole.cli._app import App
        from noderole.cli._cert import cert

        app = App(root=node.root, clock=node.clock)
        return click.testing.CliRunner().invoke(cert, args, obj=app)

    def _mint_args(self, sans: str = SANS) -> list[str]:
        return ["mint", "--dir", KONN_DIR, "--ca-cert", CA_CERT, "--ca-key", CA_KEY,
                "--cn", "konnectivity-server", "--sans", sans]  # fmt: skip

    def test_mint_prints_node_paths(self, node: Node) -> None:
        """cert mint prints CERTPATH<TAB>KEYPATH as node paths, and the action on stderr."""
        result = self._invoke(node, self._mint_args())
        assert result.exit_code == 0, result.output
        assert result.stdout == f"{KONN_DIR}/tls.crt\t{KONN_DIR}/tls.key\n"
        assert result.stderr == "minted: no existing certificate\n"
        again = self._invoke(node, self._mint_args())
        assert again.stderr.startswith("reused: valid until ")
        renamed = self._invoke(node, self._mint_args("konnectivity.example.com"))
        assert renamed.stderr == "minted (key kept): SANs changed: -10.0.0.10 -::1\n"

    def test_mint_failure_raises_certificate_error(self, node: Node) -> None:
        """A bad SAN surfaces as a CertificateError (exit code 7 in the main group)."""
        result = self._invoke(node, self._mint_args("a.example:443"))
        assert isinstance(result.exception, CertificateError)
        assert result.exception.exit_code == 7
        assert "'a.example:443'" in str(result.exception)

    def test_mint_relative_path_is_usage_error(self, node: Node) -> None:
        """A relative --dir is a usage error naming the fix."""
        args = self._mint_args()
        args[2] = "relative/dir"
        result = self._invoke(node, args)
        assert isinstance(result.exception, UsageError)
        assert "absolute" in str(result.exception)

    def test_check_table(self, node: Node) -> None:
        """cert check prints a table with CN, SANs, days left, issuer and the reuse verdict."""
        node.ensure()
        result = self._invoke(node, ["check", f"{KONN_DIR}/tls.crt", "--ca-cert", CA_CERT])
        assert result.exit_code == 0, result.output
        header, row = result.stdout.splitlines()
        assert header.split() == ["CERTIFICATE", "SUBJECT", "CN", "SANS", "EXPIRES", "DAYS",
                                  "LEFT", "ISSUER", "REUSE"]  # fmt: skip
        assert "konnectivity-server" in row
        assert "konnectivity.example.com,10.0.0.10,::1" in row
        assert " 364 " in row
        assert row.endswith("k3s-server-ca@1700000000  yes")

    def test_check_json_and_failure_exit(self, node: Node, tmp_path: Path) -> None:
        """--json gives one object per path; a re-mint verdict or unreadable file exits 1."""
        node.ensure()
        node.clock.advance(300 * DAY)
        missing = tmp_path / "missing.crt"
        result = self._invoke(
            node, ["check", f"{KONN_DIR}/tls.crt", str(missing), "--ca-cert", CA_CERT, "--json"]
        )
        assert result.exit_code == 1
        first, second = json.loads(result.stdout)
        assert first["reusable"] is False
        assert first["reason"] == "expires in 64 days (renewal window 90 days)"
        assert first["days_left"] == 64
        assert first["key_checked"] is True
        assert "does not exist" in second["error"]

    def test_check_without_ca(self, node: Node) -> None:
        """Without --ca-cert the verdict says the CA was not checked."""
        node.ensure()
        result = self._invoke(node, ["check", f"{KONN_DIR}/tls.crt"])
        assert result.exit_code == 0
        assert result.stdout.splitlines()[1].endswith("yes (CA not checked)")


class TestNeverMintsOverTheCa:
    """Minting into the CA's own directory under the CA's own names wrote the leaf over the
    cluster CA certificate and kept the CA's private key as the serving key: "minted (key
    kept)", exit 0, and the CA gone for good."""

    CA_DIR = "/var/lib/ca"

    def _openssl_node(self, tmp_path: Path) -> tuple[Node, dict[str, bytes]]:
        """A node whose CA, made by openssl, is CA_DIR/tls.crt + CA_DIR/tls.key."""
        node = Node(tmp_path / "root")
        made_crt, made_key = openssl_ca(tmp_path / "made", "ec-serial0")
        ca_dir = node.root.resolve(self.CA_DIR)
        ca_dir.mkdir(parents=True)
        (ca_dir / "tls.crt").write_bytes(made_crt.read_bytes())
        (ca_dir / "tls.key").write_bytes(made_key.read_bytes())
        (ca_dir / "tls.key").chmod(0o600)
        return node, {p.name: p.read_bytes() for p in ca_dir.iterdir()}

    @pytest.mark.parametrize(
        ("directory", "ca_cert", "ca_key", "field"),
        [
            ("/var/lib/ca", "/var/lib/ca/tls.crt", "/var/lib/ca/tls.key", "ca_cert"),
            ("/var/lib/ca", "/var/lib/ca/tls.crt", "/var/lib/ca/ca.key", "ca_cert"),
            ("/var/lib/ca", "/var/lib/ca/ca.crt", "/var/lib/ca/tls.key", "ca_key"),
            ("/var/lib/ca", "/var/lib/ca/tls.key", "/var/lib/ca/ca.key", "ca_cert"),
            ("/var/lib/ca/", "/var/lib//ca/./tls.crt", "/k", "ca_cert"),
            ("/var/lib/x/../ca", "/var/lib/ca/ca.crt", "/var/lib/ca/tls.crt", "ca_key"),
        ],
    )
    def test_the_record_refuses_the_pair_at_a_ca_path(
        self, directory: str, ca_cert: str, ca_key: str, field: str
    ) -> None:
        """A CA path that is DIR/tls.crt or DIR/tls.key is a definition error naming the field
        (with the refused value, so a value from config.toml is traced to its key)."""
        with pytest.raises(DefinitionError) as excinfo:
            MintCertificate(
                directory=directory, ca_cert=ca_cert, ca_key=ca_key, common_name="x", sans=["a"]
            )
        assert excinfo.value.field == field
        message = str(excinfo.value)
        assert f"MintCertificate: field {field!r}" in message
        assert "field 'directory'" in message
        assert "overwrite the cluster CA" in message

    def test_other_names_in_the_ca_directory_are_fine(self) -> None:
        """A pair in the CA's directory under other names than the CA's is still allowed."""
        step = MintCertificate(
            directory="/var/lib/ca",
            ca_cert="/var/lib/ca/ca.crt",
            ca_key="/var/lib/ca/ca.key",
            common_name="x",
            sans=["a"],
        )
        assert step.cert_path == "/var/lib/ca/tls.crt"

    def test_cli_mint_over_the_ca_is_a_usage_error_and_the_ca_stays(self, tmp_path: Path) -> None:
        """The reproduced command: exit 2 naming the option, the CA files untouched."""
        from noderole.cli import cli
        from noderole.cli._app import App

        node, before = self._openssl_node(tmp_path)
        app = App(root=node.root, clock=node.clock, autoload=False)
        ca_cert, ca_key = f"{self.CA_DIR}/tls.crt", f"{self.CA_DIR}/tls.key"
        args = ["cert", "mint", "--dir", self.CA_DIR, "--ca-cert", ca_cert, "--ca-key", ca_key,
                "--cn", "x", "--sans", "a.example"]  # fmt: skip
        result = click.testing.CliRunner().invoke(cli, args, obj=app)
        assert result.exit_code == 2, result.output
        assert "cert mint: --ca-cert: MintCertificate: field 'ca_cert'" in result.stderr
        assert "overwrite the cluster CA" in result.stderr
        ca_dir = node.root.resolve(self.CA_DIR)
        assert {p.name: p.read_bytes() for p in ca_dir.iterdir()} == before

    def test_a_link_on_the_way_to_the_ca_is_refused_before_anything_is_written(
        self, tmp_path: Path
    ) -> None:
        """DIR reached through a link to the CA's directory: the names differ, the files do not;
        the real paths are compared before the directory is even read."""
        node, before = self._openssl_node(tmp_path)
        (node.root.resolve("/srv")).mkdir()
        (node.root.resolve("/srv/lib")).symlink_to(node.root.resolve("/var/lib"))
        # A crashed writer's temporary: reading the directory would have removed it.
        stale = ".tls.crt.0123456789ab.tmp"
        (node.root.resolve(f"{self.CA_DIR}/{stale}")).write_bytes(b"left by a crash")
        before[stale] = b"left by a crash"
        with pytest.raises(CertificateError) as excinfo:
            node.ensure(
                directory="/srv/lib/ca",
                ca_cert=f"{self.CA_DIR}/tls.crt",
                ca_key=f"{self.CA_DIR}/tls.key",
            )
        message = str(excinfo.value)
        assert (
            "/srv/lib/ca/tls.crt (tls.crt of /srv/lib/ca) is the CA file /var/lib/ca/tls.crt"
            in (message)
        )
        assert "nothing was written" in message
        ca_dir = node.root.resolve(self.CA_DIR)
        assert {p.name: p.read_bytes() for p in ca_dir.iterdir()} == before

    def test_a_hard_link_of_the_ca_key_as_the_serving_key_is_refused(self, tmp_path: Path) -> None:
        """DIR/tls.key a second name of the CA key (same device and inode): refused too."""
        node, before = self._openssl_node(tmp_path)
        node.dir.mkdir(parents=True)
        os.link(node.root.resolve(f"{self.CA_DIR}/tls.key"), node.key_file)
        with pytest.raises(CertificateError, match=r"is the CA file /var/lib/ca/tls\.key"):
            node.ensure(ca_cert=f"{self.CA_DIR}/tls.crt", ca_key=f"{self.CA_DIR}/tls.key")
        assert sorted(p.name for p in node.dir.iterdir()) == ["tls.key"]
        ca_dir = node.root.resolve(self.CA_DIR)
        assert {p.name: p.read_bytes() for p in ca_dir.iterdir()} == before

    def test_the_dry_run_verdict_says_it_would_fail(self, tmp_path: Path) -> None:
        """apply --dry-run and renew judge by step_verdict: it refuses the same pair."""
        from noderole.certs import step_verdict

        node, _ = self._openssl_node(tmp_path)
        (node.root.resolve("/srv")).mkdir()
        (node.root.resolve("/srv/ca")).symlink_to(node.root.resolve(self.CA_DIR))
        step = node.request(
            directory="/srv/ca/",
            ca_cert=f"{self.CA_DIR}/tls.crt",
            ca_key=f"{self.CA_DIR}/ca.key",
        )
        with pytest.raises(CertificateError, match=r"is the CA file /var/lib/ca/tls\.crt"):
            step_verdict(step, root=node.root, now=utc(node.clock.time()))


class TestCommonNameLength:
    """A common name over 64 characters passed plan and ended a mint in cryptography's bare
    ``ValueError: Attribute's length must be >= 1 and <= 64``."""

    @pytest.mark.parametrize("name", ["x" * 65, "é" * 33, "a\0b"])
    def test_the_record_refuses_it_naming_the_field(self, name: str) -> None:
        with pytest.raises(DefinitionError, match=r"field 'common_name' must be") as excinfo:
            MintCertificate(directory="/d", ca_cert="/c", ca_key="/k", common_name=name, sans=["a"])
        assert excinfo.value.field == "common_name"

    def _mint(self, node: Node, common_name: str) -> click.testing.Result:
        args = TestCli()._mint_args()
        args[args.index("--cn") + 1] = common_name
        return TestCli()._invoke(node, args)

    def test_sixty_four_characters_mint(self, node: Node) -> None:
        """The longest name allowed is minted as given."""
        name = "k" * 64
        assert node.ensure(common_name=name).action == "minted"
        cert, _ = node.pair()
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == name

    def test_cli_too_long_is_a_usage_error(self, node: Node) -> None:
        result = self._mint(node, "x" * 65)
        assert isinstance(result.exception, UsageError), result.output
        message = str(result.exception)
        assert message.startswith("cert mint: --cn: MintCertificate: field 'common_name'")
        assert "1 to 64 characters" in message
        assert not node.dir.exists()

    def test_cli_empty_gets_no_hint_about_paths(self, node: Node) -> None:
        """--cn "" said "...; node paths are absolute (e.g. /var/lib/x)": not about paths."""
        result = self._mint(node, "")
        assert isinstance(result.exception, UsageError), result.output
        message = str(result.exception)
        assert message == (
            "cert mint: --cn: MintCertificate: field 'common_name' must be a non-empty string, "
            "got ''"
        )


class TestCliPathsClimbingOut:
    """cert check /../../x.crt ended in a traceback (ValueError from resolving the path)."""

    @pytest.mark.parametrize(
        ("args", "named"),
        [
            (["check", "/../../x.crt"], "PATH '/../../x.crt'"),
            (["check", f"{KONN_DIR}/tls.crt", "--ca-cert", "/../ca.crt"], "--ca-cert '/../ca.crt'"),
            (["check", f"{KONN_DIR}/tls.crt", "/a/../../x.crt"], "PATH '/a/../../x.crt'"),
        ],
    )
    def test_check_is_a_usage_error_naming_the_path(
        self, node: Node, args: list[str], named: str
    ) -> None:
        result = TestCli()._invoke(node, args)
        assert isinstance(result.exception, UsageError), result.output
        assert str(result.exception).startswith(f"cert check: {named}: ")
        assert "climbs above /" in str(result.exception)

    @pytest.mark.parametrize(("option", "index"), [("--dir", 2), ("--ca-cert", 4), ("--ca-key", 6)])
    def test_mint_is_a_usage_error_naming_the_option(
        self, node: Node, option: str, index: int
    ) -> None:
        args = TestCli()._mint_args()
        assert args[index - 1] == option
        args[index] = "/../x"
        result = TestCli()._invoke(node, args)
        assert isinstance(result.exception, UsageError), result.output
        assert str(result.exception).startswith(f"cert mint: {option}: ")
        assert "climbs above the root" in str(result.exception)


class TestCheckRoleCombined:
    """--role with --ca-cert said "give PATHs (with --ca-cert) or --role, not both" though no
    PATH was given."""

    @pytest.mark.parametrize(
        ("extra", "combined"),
        [
            (["--ca-cert", CA_CERT], "--ca-cert"),
            ([f"{KONN_DIR}/tls.crt"], "PATHs"),
            ([f"{KONN_DIR}/tls.crt", "--ca-cert", CA_CERT], "PATHs and --ca-cert"),
        ],
    )
    def test_the_message_names_what_was_combined(
        self, node: Node, extra: list[str], combined: str
    ) -> None:
        result = TestCli()._invoke(node, ["check", "--role", "server", *extra])
        assert isinstance(result.exception, UsageError), result.output
        assert str(result.exception).startswith(
            f"cert check: --role cannot be combined with {combined}: "
        )
