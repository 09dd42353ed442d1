"""CAs whose constraints TLS clients enforce: the mint checks its leaf as a client would.

Each CA here makes ``openssl verify`` (or a handshake at OpenSSL's default security level)
refuse a leaf signed as noderole signs; the mint refuses with the constraint and the fix and
writes nothing. CAs that cryptography's strictest rules refuse but clients accept still mint.
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from noderole.certs import CertificateAuthority, _mint, inspect_certificate, load_ca
from noderole.errors import CertificateError
from noderole.sans import parse_sans
from tests.test_certs import CA_CERT, CA_KEY, DAY, CAKey, Node, cert_pem, utc

SANS = "konnectivity.example.com,10.0.0.10"


def _ca(
    name: str,
    *,
    now: float,
    key: CAKey | None = None,
    signer: tuple[x509.Certificate, CAKey] | None = None,
    extensions: Sequence[tuple[x509.ExtensionType, bool]] = (),
    path_length: int | None = None,
    critical_constraints: bool = True,
    key_usage: bool = True,
) -> tuple[x509.Certificate, CAKey]:
    key = key or ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer, issuer_key = (signer[0].subject, signer[1]) if signer else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(utc(now - DAY))
        .not_valid_after(utc(now + 3650 * DAY))
        .add_extension(
            x509.BasicConstraints(ca=True, path_length=path_length), critical=critical_constraints
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if key_usage:
        usage = x509.KeyUsage(True, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage, critical=True)
    if signer:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer[1].public_key()),
            critical=False,
        )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(issuer_key, hashes.SHA256()), key


def _install(node: Node, certs: Sequence[x509.Certificate], key: CAKey) -> Path:
    node.install_ca(b"".join(cert_pem(c) for c in certs), key)
    return node.root.resolve(CA_CERT)


def _openssl_verify(ca_file: Path, leaf: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``openssl verify`` of ``leaf`` (its served chain untrusted) for serverAuth."""
    return subprocess.run(
        ["openssl", "verify", "-purpose", "sslserver", "-CAfile", str(ca_file),
         "-untrusted", str(leaf), *options, str(leaf)],
        capture_output=True, text=True,
    )  # fmt: skip


def _signed_as_before(ca_file: Path, key_file: Path, tmp_path: Path, *, now: float) -> Path:
    """The leaf the mint made before it checked it as a client does (no check of the CA file
    either), written with its served chain to a scratch file for openssl to judge."""
    chain = x509.load_pem_x509_certificates(ca_file.read_bytes())
    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
    ca = CertificateAuthority(cert=chain[0], key=key, chain=tuple(chain), cert_path=ca_file)
    leaf = _mint(
        ca,
        ec.generate_private_key(ec.SECP256R1()),
        common_name="konnectivity-server",
        sans=parse_sans(SANS),
        now=utc(now),
    )
    path = tmp_path / "leaf.crt"
    path.write_bytes(b"".join(cert_pem(c) for c in (leaf, *ca.bundle)))
    return path


def _refused_by_openssl(node: Node, tmp_path: Path, error: str, *options: str) -> None:
    ca_file, key_file = node.root.resolve(CA_CERT), node.root.resolve(CA_KEY)
    leaf = _signed_as_before(ca_file, key_file, tmp_path, now=node.clock.time())
    result = _openssl_verify(ca_file, leaf, *options)
    assert result.returncode != 0
    assert error in result.stdout + result.stderr, result.stdout + result.stderr


def _mint_is_refused(node: Node, *words: str) -> str:
    before = node.snapshot() if node.dir.exists() else {}
    with pytest.raises(CertificateError) as info:
        node.ensure(sans=(SANS,))
    message = str(info.value)
    assert str(node.root.resolve(CA_CERT)) in message
    for word in words:
        assert word in message, message
    after = node.snapshot() if node.dir.exists() else {}
    assert after == before
    return message


def _node(tmp_path: Path, **ca: object) -> Node:
    """A node whose CA file holds one self-signed CA made with ``ca``."""
    node = Node(tmp_path / "root")
    cert, key = _ca("constrained-ca", now=node.clock.time(), **ca)  # type: ignore[arg-type]
    _install(node, [cert], key)
    return node


def _excluding(name: str) -> x509.NameConstraints:
    return x509.NameConstraints(permitted_subtrees=None, excluded_subtrees=[x509.DNSName(name)])


class TestNameConstraints:
    def test_an_excluded_san_is_refused_naming_it(self, tmp_path: Path) -> None:
        """nameConstraints excluding a SAN: openssl error 48; the mint refuses naming the SAN,
        the constraint and the fix, and writes nothing."""
        node = _node(tmp_path, extensions=[(_excluding("example.com"), True)])
        _refused_by_openssl(
            node, tmp_path, "error 48", "-verify_hostname", "konnectivity.example.com"
        )
        message = _mint_is_refused(node, "konnectivity.example.com", "nameConstraints exclude")
        assert "EKS_KONNECTIVITY_SANS" in message
        assert "10.0.0.10" not in message.split("forbids")[1].split(":")[0]

    def test_a_san_not_permitted_is_refused_naming_it(self, tmp_path: Path) -> None:
        """nameConstraints permitting other addresses only: openssl error 47; refused."""
        permitted = x509.NameConstraints(
            permitted_subtrees=[x509.IPAddress(ipaddress.ip_network("192.168.0.0/16"))],
            excluded_subtrees=None,
        )
        node = _node(tmp_path, extensions=[(permitted, True)])
        _refused_by_openssl(node, tmp_path, "error 47", "-verify_ip", "10.0.0.10")
        _mint_is_refused(node, "forbids 10.0.0.10", "nameConstraints do not permit")

    def test_sans_the_constraints_permit_mint_and_verify(self, tmp_path: Path) -> None:
        """A CA permitting the SANs' subtrees mints, and openssl accepts the leaf."""
        permitted = x509.NameConstraints(
            permitted_subtrees=[
                x509.DNSName("example.com"),
                x509.IPAddress(ipaddress.ip_network("10.0.0.0/8")),
            ],
            excluded_subtrees=None,
        )
        node = _node(tmp_path, extensions=[(permitted, True)])
        assert node.ensure(sans=(SANS,)).action == "minted"
        assert node.ensure(sans=(SANS,)).action == "reused"
        ca_file = node.root.resolve(CA_CERT)
        for check in (
            ["-verify_hostname", "konnectivity.example.com"],
            ["-verify_ip", "10.0.0.10"],
        ):
            assert _openssl_verify(ca_file, node.cert_file, *check).returncode == 0

    def test_a_good_pair_is_kept_when_the_reissued_ca_forbids_it(self, tmp_path: Path) -> None:
        """The CA issued again (same key and name) with nameConstraints excluding a SAN of the
        pair: the pair is no longer reused, the mint refuses, and the pair stays as it was;
        ``cert check --ca-cert`` calls it not reusable."""
        node = Node(tmp_path / "root")
        now = node.clock.time()
        cert, key = _ca("constrained-ca", now=now)
        _install(node, [cert], key)
        node.ensure(sans=(SANS,))
        constrained, _ = _ca(
            "constrained-ca", now=now, key=key, extensions=[(_excluding("example.com"), True)]
        )
        _install(node, [constrained], key)
        _mint_is_refused(node, "nameConstraints exclude")
        report = inspect_certificate(
            node.cert_file, ca_cert=node.root.resolve(CA_CERT), now=utc(node.clock.time())
        )
        assert not report.reusable
        assert "TLS clients trusting the CA refuse it" in report.reason


class TestExtendedKeyUsage:
    def test_a_ca_for_client_auth_only_is_refused(self, tmp_path: Path) -> None:
        """A CA whose extendedKeyUsage is clientAuth only: openssl error 26; refused."""
        eku = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
        node = _node(tmp_path, extensions=[(eku, False)])
        _refused_by_openssl(node, tmp_path, "error 26")
        _mint_is_refused(node, "extendedKeyUsage lacks serverAuth", "may not issue serving")

    def test_a_ca_allowing_server_auth_mints(self, tmp_path: Path) -> None:
        """A CA whose extendedKeyUsage holds serverAuth mints, and openssl accepts the leaf."""
        eku = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
        node = _node(tmp_path, extensions=[(eku, False)])
        assert node.ensure(sans=(SANS,)).action == "minted"
        assert _openssl_verify(node.root.resolve(CA_CERT), node.cert_file).returncode == 0


class TestPathLength:
    def test_a_root_allowing_no_intermediate_is_refused(self, tmp_path: Path) -> None:
        """CA file [intermediate, root] whose root has pathLenConstraint 0: openssl error 25;
        refused."""
        node = Node(tmp_path / "root")
        now = node.clock.time()
        root_ca = _ca("root-ca", now=now, path_length=0)
        inter, inter_key = _ca("intermediate-ca", now=now, signer=root_ca)
        _install(node, [inter, root_ca[0]], inter_key)
        _refused_by_openssl(node, tmp_path, "error 25")
        _mint_is_refused(node, "pathLenConstraint")

    def test_a_root_allowing_one_intermediate_mints(self, tmp_path: Path) -> None:
        """pathLenConstraint 1 on the root allows the intermediate: minted."""
        node = Node(tmp_path / "root")
        now = node.clock.time()
        root_ca = _ca("root-ca", now=now, path_length=1)
        inter, inter_key = _ca("intermediate-ca", now=now, signer=root_ca)
        _install(node, [inter, root_ca[0]], inter_key)
        assert node.ensure(sans=(SANS,)).action == "minted"
        assert _openssl_verify(node.root.resolve(CA_CERT), node.cert_file).returncode == 0


def _openssl_ca(tmp_path: Path, *keygen: str) -> tuple[Path, Path]:
    crt, key = tmp_path / "ca.crt", tmp_path / "ca.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-nodes", "-days", "30", "-subj", "/CN=openssl-ca",
         *keygen, "-keyout", str(key), "-out", str(crt),
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign"],
        check=True, capture_output=True,
    )  # fmt: skip
    return crt, key


class TestCaKeys:
    def test_an_rsa_pss_ca_is_refused_and_its_leaves_are_not_reused(self, tmp_path: Path) -> None:
        """An RSA-PSS CA: a leaf signed PKCS#1 v1.5 fails openssl (unable to get local issuer
        certificate). It is refused, naming the key type; ``cert check`` no longer calls such a
        leaf reusable."""
        crt, key = _openssl_ca(tmp_path, "-newkey", "rsa-pss", "-pkeyopt", "rsa_keygen_bits:2048")
        node = Node(tmp_path / "root")
        node.install_ca(crt.read_bytes(), key.read_bytes())
        with pytest.raises(CertificateError, match="RSA-PSS key"):
            load_ca(crt, key, now=utc(node.clock.time()))
        _mint_is_refused(node, "RSA-PSS key", "EC or a plain RSA key")
        # the leaf a mint made before: signed PKCS#1 v1.5 with the PSS key
        leaf_file = _signed_as_before(crt, key, tmp_path, now=node.clock.time())
        result = _openssl_verify(crt, leaf_file)
        assert result.returncode != 0
        assert "unable to get local issuer certificate" in result.stdout + result.stderr
        report = inspect_certificate(leaf_file, ca_cert=crt, now=utc(node.clock.time()))
        assert not report.reusable

    def test_an_rsa_1024_ca_is_refused(self, tmp_path: Path) -> None:
        """An RSA-1024 CA: openssl at security level 2 refuses it (error 67, CA certificate key
        too weak); refused naming the size and the minimum."""
        node = _node(tmp_path, key=rsa.generate_private_key(public_exponent=65537, key_size=1024))
        _refused_by_openssl(node, tmp_path, "CA certificate key too weak", "-auth_level", "2")
        _mint_is_refused(node, "1024-bit RSA key", "at least 2048 bits")


class TestStricterThanClients:
    @pytest.mark.parametrize(
        "ca",
        [{"critical_constraints": False}, {"key_usage": False}],
        ids=["basic-constraints-not-critical", "no-key-usage"],
    )
    def test_cas_clients_accept_still_mint(self, tmp_path: Path, ca: dict[str, object]) -> None:
        """CAs that OpenSSL (and Go) accept but cryptography's Web PKI rules refuse (a
        basicConstraints not marked critical, no keyUsage) still mint, and verify."""
        node = _node(tmp_path, **ca)
        assert node.ensure(sans=(SANS,)).action == "minted"
        assert node.ensure(sans=(SANS,)).action == "reused"
        ca_file = node.root.resolve(CA_CERT)
        assert _openssl_verify(ca_file, node.cert_file, "-verify_ip", "10.0.0.10").returncode == 0
