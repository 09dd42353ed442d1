"""Minted certificates meet real TLS: ``openssl verify -x509_strict`` and Python ssl handshakes."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from noderole.sans import parse_sans
from tests.test_certs import CA_CERT, Node, cert_pem, make_ca, openssl_ca

SANS = "konnectivity.example.com,*.nlb.example.com,bücher.example,127.0.0.1,::1,10.0.0.10"


def _openssl_verify(ca_file: Path, leaf: Path, *check: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["openssl", "verify", "-x509_strict", "-purpose", "sslserver", "-CAfile", str(ca_file),
         "-untrusted", str(leaf), *check, str(leaf)],
        capture_output=True, text=True,
    )  # fmt: skip


def _checks(sans: str) -> list[list[str]]:
    """One openssl check per SAN (a wildcard is checked with a name it covers)."""
    result = []
    for san in parse_sans(sans):
        if san.kind == "ip":
            result.append(["-verify_ip", san.value])
        else:
            result.append(["-verify_hostname", san.value.replace("*", "agent-1")])
    return result


class TestOpensslVerify:
    @pytest.mark.parametrize("kind", ["ec-serial0", "rsa-pkcs1", "rsa-pkcs8"])
    def test_every_san_verifies(self, tmp_path: Path, kind: str) -> None:
        """openssl -x509_strict accepts the leaf for serverAuth under every SAN, for each CA."""
        crt, key = openssl_ca(tmp_path / "ca", kind)
        node = Node(tmp_path / "root")
        node.install_ca(crt.read_bytes(), key.read_bytes())
        node.ensure(sans=(SANS,))
        for check in _checks(SANS):
            result = _openssl_verify(crt, node.cert_file, *check)
            assert result.returncode == 0, (check, result.stdout, result.stderr)

    def test_chain_file(self, tmp_path: Path) -> None:
        """With an intermediate signer, the served bundle verifies against the root alone."""
        node = Node(tmp_path / "root")
        now = node.clock.time()
        root_ca = make_ca("root-ca", now=now)
        inter, inter_key = make_ca("intermediate-ca", now=now, signer=root_ca)
        node.install_ca(cert_pem(inter) + cert_pem(root_ca[0]), inter_key)
        node.ensure(sans=(SANS,))
        trust = tmp_path / "root-only.crt"
        trust.write_bytes(cert_pem(root_ca[0]))
        for check in _checks(SANS):
            result = _openssl_verify(trust, node.cert_file, *check)
            assert result.returncode == 0, (check, result.stdout, result.stderr)

    def test_wrong_name_and_ip_fail(self, tmp_path: Path) -> None:
        """openssl refuses a name and an address that are not SANs (the check can fail)."""
        crt, key = openssl_ca(tmp_path / "ca", "ec-serial0")
        node = Node(tmp_path / "root")
        node.install_ca(crt.read_bytes(), key.read_bytes())
        node.ensure(sans=(SANS,))
        assert _openssl_verify(crt, node.cert_file, "-verify_hostname", "evil.example").returncode
        assert _openssl_verify(crt, node.cert_file, "-verify_ip", "10.0.0.11").returncode
        assert _openssl_verify(
            crt, node.cert_file, "-verify_hostname", "a.b.nlb.example.com"
        ).returncode


@attrs.define
class TlsServer:
    """A TLS server on a loopback address serving one pair; each connection gets b'ok'."""

    sock: socket.socket
    thread: threading.Thread
    stop: threading.Event

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.sock.getsockname()[:2]
        return host, port


def _serve(sock: socket.socket, context: ssl.SSLContext, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            conn, _ = sock.accept()
        except (TimeoutError, OSError):
            continue
        with contextlib.suppress(OSError), conn:
            conn.settimeout(5)
            with context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")


@contextlib.contextmanager
def tls_server(
    family: socket.AddressFamily, host: str, cert: Path, key: Path
) -> Iterator[TlsServer]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    sock = socket.socket(family, socket.SOCK_STREAM)
    stop = threading.Event()
    thread = threading.Thread(target=_serve, args=(sock, context, stop), daemon=True)
    try:
        sock.bind((host, 0))
        sock.listen()
        sock.settimeout(0.05)
        thread.start()
        yield TlsServer(sock=sock, thread=thread, stop=stop)
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(timeout=10)
        sock.close()


def _connect(server: TlsServer, ca_file: Path, name: str) -> bytes:
    context = ssl.create_default_context(cafile=str(ca_file))
    family = socket.AF_INET6 if ":" in server.address[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as raw:
        raw.settimeout(5)
        raw.connect(server.address)
        with context.wrap_socket(raw, server_hostname=name) as tls:
            return tls.recv(2)


def _has_ipv6_loopback() -> str | None:
    if not socket.has_ipv6:
        return "Python was built without IPv6"
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError as error:
        return f"no IPv6 loopback on this machine: {error}"
    return None


@pytest.fixture
def minted(tmp_path: Path) -> tuple[Node, Path]:
    """A node with a pair minted from an openssl-made k3s-like CA (serial 0), and the CA file."""
    crt, key = openssl_ca(tmp_path / "ca", "ec-serial0")
    node = Node(tmp_path / "root")
    node.install_ca(crt.read_bytes(), key.read_bytes())
    node.ensure(sans=(SANS,))
    return node, node.root.resolve(CA_CERT)


class TestHandshake:
    @pytest.mark.parametrize(
        ("family", "host"), [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")]
    )
    def test_every_san_connects(
        self, minted: tuple[Node, Path], family: socket.AddressFamily, host: str
    ) -> None:
        """A client trusting only the CA completes a handshake under each DNS SAN and its own IP."""
        if family == socket.AF_INET6 and (why := _has_ipv6_loopback()):
            pytest.skip(why)
        node, ca_file = minted
        names = [s.value.replace("*", "agent-1") for s in parse_sans(SANS) if s.kind == "dns"]
        with tls_server(family, host, node.cert_file, node.key_file) as server:
            for name in [*names, host]:
                assert _connect(server, ca_file, name) == b"ok", name

    def test_wrong_name_fails(self, minted: tuple[Node, Path]) -> None:
        """A name that is not a SAN fails hostname verification."""
        node, ca_file = minted
        with tls_server(socket.AF_INET, "127.0.0.1", node.cert_file, node.key_file) as server:
            with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
                _connect(server, ca_file, "evil.example")
            with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
                _connect(server, ca_file, "10.0.0.11")

    def test_other_ca_fails(self, minted: tuple[Node, Path], tmp_path: Path) -> None:
        """A client trusting a different CA with the same name refuses the certificate."""
        node, _ = minted
        other, _key = openssl_ca(tmp_path / "other", "ec-serial0")
        with (
            tls_server(socket.AF_INET, "127.0.0.1", node.cert_file, node.key_file) as server,
            pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"),
        ):
            _connect(server, other, "konnectivity.example.com")
