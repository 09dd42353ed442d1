"""Certificate mint-or-reuse: noderole in-process against the openssl CLI doing the same work.

Rows:
- reuse check: ``ensure_certificate`` on a good existing pair (load and check the CA, read the
  pair, verify the signature, compare names and dates); peer: ``openssl verify`` + ``openssl x509
  -checkend``, the checks a shell script would run.
- mint: ``ensure_certificate`` into an empty directory (P-256 key, sign, two durable atomic writes
  with fsync); peer: ``openssl genpkey`` + ``req`` + ``x509 -req`` with the same extensions.
- mint, in memory: key generation and signing only, to separate CPU from file-system cost.

The CA is made by the openssl CLI like k3s's: P-256, ``EC PRIVATE KEY``, serial number 0.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench._common import Row

_EXTENSIONS = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:konnectivity.example.com, IP:10.0.0.10, IP:::1
"""
_SANS = "konnectivity.example.com,10.0.0.10,::1"


def _ms(action: Callable[[], object], iterations: int) -> list[float]:
    samples = []
    for _ in range(iterations):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def _make_ca(directory: Path) -> tuple[Path, Path]:
    tls = directory / "var/lib/rancher/k3s/server/tls"
    tls.mkdir(parents=True)
    raw, crt, key = tls / "raw.key", tls / "server-ca.crt", tls / "server-ca.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-set_serial", "0", "-newkey", "ec", "-pkeyopt",
         "ec_paramgen_curve:P-256", "-keyout", str(raw), "-out", str(crt), "-nodes", "-days",
         "3650", "-subj", "/CN=k3s-server-ca@1700000000", "-addext",
         "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign"],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(["openssl", "ec", "-in", str(raw), "-out", str(key)], check=True,
                   capture_output=True)  # fmt: skip
    raw.unlink()
    return crt, key


def _openssl_mint(work: Path, ca_crt: Path, ca_key: Path, ext: Path) -> None:
    key, csr, crt = work / "tls.key", work / "tls.csr", work / "tls.crt"
    subprocess.run(
        ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-out", str(key)],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        ["openssl", "req", "-new", "-key", str(key), "-subj", "/CN=konnectivity-server",
         "-out", str(csr)],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
         "-set_serial", f"0x{os.urandom(15).hex()}",
         "-days", "365", "-extfile", str(ext), "-out", str(crt)],
        check=True, capture_output=True,
    )  # fmt: skip


def _openssl_reuse_check(ca_crt: Path, crt: Path) -> None:
    subprocess.run(
        ["openssl", "verify", "-purpose", "sslserver", "-CAfile", str(ca_crt), str(crt)],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        ["openssl", "x509", "-checkend", str(90 * 86400), "-noout", "-in", str(crt)],
        check=True, capture_output=True,
    )  # fmt: skip


def run(quick: bool) -> list[Row]:
    """Measure reuse and mint, side by side with the openssl CLI."""
    from noderole import certs
    from noderole.clock import SystemClock
    from noderole.records import MintCertificate
    from noderole.root import NodeRoot
    from noderole.sans import parse_sans

    fast_n, cli_n = (15, 3) if quick else (400, 30)
    clock = SystemClock()
    with tempfile.TemporaryDirectory(prefix="bench-certs-") as scratch:
        base = Path(scratch)
        ca_crt, ca_key = _make_ca(base)
        root = NodeRoot(base)

        def request(directory: str) -> MintCertificate:
            return MintCertificate(
                directory=directory,
                ca_cert="/var/lib/rancher/k3s/server/tls/server-ca.crt",
                ca_key="/var/lib/rancher/k3s/server/tls/server-ca.key",
                common_name="konnectivity-server",
                sans=(_SANS,),
            )

        reuse_request = request("/pki/reuse")
        first = certs.ensure_certificate(reuse_request, root=root, clock=clock)
        assert first.action == "minted"

        def reuse() -> None:
            outcome = certs.ensure_certificate(reuse_request, root=root, clock=clock)
            assert outcome.action == "reused"

        reuse_ms = _ms(reuse, fast_n)
        leaf = root.resolve("/pki/reuse/tls.crt")
        peer_reuse_ms = _ms(lambda: _openssl_reuse_check(ca_crt, leaf), cli_n)

        counter = iter(range(10**9))

        def mint() -> None:
            outcome = certs.ensure_certificate(
                request(f"/pki/mint-{next(counter)}"), root=root, clock=clock
            )
            assert outcome.action == "minted"

        mint_ms = _ms(mint, fast_n)

        from cryptography.hazmat.primitives.asymmetric import ec

        now = certs._now(clock)
        ca = certs.load_ca(ca_crt, ca_key, now=now)
        sans = parse_sans(_SANS)

        def mint_in_memory() -> None:
            key = ec.generate_private_key(ec.SECP256R1())
            certs._mint(ca, key, common_name="konnectivity-server", sans=sans, now=now)

        memory_ms = _ms(mint_in_memory, fast_n)

        ext = base / "ext.cnf"
        ext.write_text(_EXTENSIONS)
        peer_dirs = iter(range(10**9))

        def openssl_mint() -> None:
            work = base / f"openssl-{next(peer_dirs)}"
            work.mkdir()
            _openssl_mint(work, ca_crt, ca_key, ext)

        peer_mint_ms = _ms(openssl_mint, cli_n)

    return [
        Row.from_samples(
            name, "ms", samples, peer=peer, peer_samples=peer_samples, target=target, p95=True
        )
        for name, samples, peer, peer_samples, target in [
            ("cert reuse check", reuse_ms, "openssl verify + x509 -checkend", peer_reuse_ms,
             "<= 2 ms"),
            ("cert mint (durable write)", mint_ms, "openssl genpkey + req + x509 -req",
             peer_mint_ms, "<= 5 ms"),
            ("cert mint (in memory)", memory_ms, None, None, ""),
        ]
    ]  # fmt: skip


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (smoke test)")
    args = parser.parse_args()
    for row in run(args.quick):
        peer = ""
        if row.peer is not None and row.peer_median is not None:
            peer = f"   vs {row.peer}: {row.peer_median:.2f} {row.unit} (x{row.ratio:.3f})"
        print(
            f"{row.benchmark:28} median {row.median:7.3f} {row.unit}  p95 {row.p95:7.3f}  "
            f"n={row.samples:4}  target {row.target or '-':8}{peer}"
        )


if __name__ == "__main__":
    main()
