"""A throwaway cluster CA, written where a plugin expects to find it.

Some CAs (k3s's server CA) have serial number 0. cryptography's certificate builder refuses a serial
number <= 0, so the certificate is made by the ``openssl`` command line (as k3s's own tests of
other tools do); the key is generated in-process and stored as ``EC PRIVATE KEY`` (SEC1), like
k3s's. Loading a serial-0 certificate, and reading its serial number, make cryptography emit a
``CryptographyDeprecationWarning``; :func:`load_certificate` and :func:`serial_number` silence that
warning (and only it) around those two calls, so a test suite run with ``-W error`` still sees
every other warning.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from noderole import recordclass
from noderole.testing._root import RootLike, as_node_root

if TYPE_CHECKING:
    from cryptography import x509

__all__ = [
    "ClusterCA",
    "load_certificate",
    "make_cluster_ca",
    "serial_number",
]

_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
x509_extensions = v3_ca
prompt = no
[dn]
CN = {common_name}
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,digitalSignature,keyEncipherment,keyCertSign
subjectKeyIdentifier = hash
"""


@recordclass.frozen(kw_only=True)
class ClusterCA:
    """A CA written into a node root: where its files are and how to check what it signed."""

    cert_path: str
    """Node path of the CA certificate."""
    key_path: str
    """Node path of the CA key."""
    cert_file: Path
    """The certificate on this machine (under the root)."""
    key_file: Path
    """The key on this machine (under the root)."""
    common_name: str
    """The CA's subject CN (``k3s-server-ca@<unix time>`` by default)."""

    def certificate(self) -> x509.Certificate:
        """The CA certificate, loaded (serial-0 warning silenced)."""
        return load_certificate(self.cert_file)

    @property
    def serial_number(self) -> int:
        """The CA certificate's serial number (0 for a k3s-style CA)."""
        return serial_number(self.certificate())

    def signed(self, certificate: x509.Certificate | str | Path) -> bool:
        """True when ``certificate`` (an object, or a PEM file on this machine) was issued by this
        CA: issuer name and signature both check out."""
        from cryptography.exceptions import InvalidSignature

        leaf = (
            certificate
            if not isinstance(certificate, str | Path)
            else load_certificate(certificate)
        )
        try:
            leaf.verify_directly_issued_by(self.certificate())
        except (ValueError, TypeError, InvalidSignature):
            return False
        return True


def load_certificate(path: str | Path) -> x509.Certificate:
    """The first PEM certificate in the file at ``path`` (a path on this machine).

    Silences cryptography's deprecation warning about serial number 0 (k3s's CA has it) and no
    other warning.
    """
    from cryptography import x509
    from cryptography.utils import CryptographyDeprecationWarning

    data = Path(path).read_bytes()
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", category=CryptographyDeprecationWarning, message=".*serial number.*"
        )
        return x509.load_pem_x509_certificate(data)


def serial_number(certificate: x509.Certificate) -> int:
    """``certificate.serial_number`` without the deprecation warning cryptography gives for 0.

    Recent cryptography releases warn when the serial number is *read*, not only when the
    certificate is loaded; this silences that one warning around the read.
    """
    from cryptography.utils import CryptographyDeprecationWarning

    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", category=CryptographyDeprecationWarning, message=".*serial number.*"
        )
        return certificate.serial_number


def make_cluster_ca(
    node_root: RootLike,
    *,
    cert_path: str,
    key_path: str,
    serial_zero: bool = False,
    common_name: str | None = None,
    days: int = 3650,
) -> ClusterCA:
    """Write a fresh ECDSA P-256 CA at ``cert_path`` and ``key_path`` (node paths).

    The certificate is valid from now (the real time) for ``days`` days, with serial number 0
    when ``serial_zero`` (k3s's habit) and a random one otherwise. The common name defaults to
    ``noderole-test-ca@<unix time>``. (The k3s plugin's ``noderole_k3s.testing.make_k3s_ca``
    makes one at k3s's paths, shaped like k3s's.) The key is written with mode
    0600 as ``EC PRIVATE KEY``. Needs the ``openssl`` command.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError(
            "make_cluster_ca needs the openssl command to build a serial-0 certificate "
            "(cryptography refuses serial 0); install it (apt-get install openssl)"
        )
    root = as_node_root(node_root)
    name = common_name or f"noderole-test-ca@{int(time.time())}"
    key = ec.generate_private_key(ec.SECP256R1())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    cert_file, key_file = root.resolve(cert_path), root.resolve(key_path)
    with tempfile.TemporaryDirectory(prefix="noderole-ca-") as scratch:
        config = Path(scratch) / "openssl.cnf"
        # A config of our own: the machine's openssl.cnf must not decide the CA's extensions.
        config.write_text(_OPENSSL_CONFIG.format(common_name=name))
        key_tmp = Path(scratch) / "ca.key"
        key_tmp.write_bytes(key_pem)
        cert_tmp = Path(scratch) / "ca.crt"
        argv = [openssl, "req", "-x509", "-new", "-key", str(key_tmp), "-sha256"]
        argv += ["-days", str(days), "-config", str(config), "-out", str(cert_tmp)]
        if serial_zero:
            argv += ["-set_serial", "0"]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"openssl req failed ({done.returncode}): {done.stderr.strip()}")
        cert_pem = cert_tmp.read_bytes()
    for local, data, mode in ((key_file, key_pem, 0o600), (cert_file, cert_pem, 0o644)):
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(data)
        local.chmod(mode)
    return ClusterCA(
        cert_path=cert_path,
        key_path=key_path,
        cert_file=cert_file,
        key_file=key_file,
        common_name=name,
    )
