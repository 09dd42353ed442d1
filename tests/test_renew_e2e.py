"""`noderole renew` and `noderole reset` for real: the native supervisor under a scratch root,
the k3s and konnectivity plugins with their stand-ins.

konnectivity-server's certificate is replaced by a valid one that expires in 10 days: `cert check
--role` flags it, `renew` re-mints it and restarts konnectivity-server only (k3s keeps its pid).
Then `reset` stops everything and removes what noderole wrote, and nothing else.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from noderole.testing import (
    ScratchRoot,
    end_node_processes,
    eventually,
    load_certificate,
    node_processes,
    stage_standins,
)
from noderole_k3s.testing import K3S_CA_CERT, K3S_CA_KEY

k3s_plugin = pytest.importorskip("noderole_k3s.plugin")
konnectivity_plugin = pytest.importorskip("noderole_konnectivity.plugin")

pytestmark = pytest.mark.slow

FIRST_BOOT = "/etc/spinifex-eks/first-boot.env"
CERT = "/var/lib/spinifex-eks/konnectivity/tls.crt"
KEY = "/var/lib/spinifex-eks/konnectivity/tls.key"
SANS = ["konnectivity.example.com", "127.0.0.1"]
PLANTED = "/etc/rancher/k3s/config.yaml.d/99-mine.yaml"

Noderole = Callable[..., subprocess.CompletedProcess[str]]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def root(node_root: ScratchRoot) -> Iterator[ScratchRoot]:
    """A staged node root; afterwards every process started for it is ended, pass or fail."""
    config = (
        "[noderole]\nnet_check = false\n"
        f"[konnectivity]\nhealth_port = {free_port()}\nrespawn_delay = 0.2\n"
    )
    plugins = [("k3s", k3s_plugin), ("konnectivity", konnectivity_plugin)]
    stage_standins(*plugins, node_root=node_root, config_text=config, pick_port=free_port)
    node_root.write_config(config)  # the test's own settings replace the rehearsal's
    node_root.write_env(
        FIRST_BOOT, {"EKS_KONNECTIVITY_SANS": ",".join(SANS), "EKS_KONNECTIVITY_HOST": "127.0.0.1"}
    )
    yield node_root
    assert end_node_processes(node_root) == []


@pytest.fixture
def noderole(root: ScratchRoot) -> Noderole:
    """The noderole CLI under the root, with only the k3s and konnectivity plugins."""
    names = {ep.name for ep in importlib.metadata.entry_points(group="noderole")}
    disabled = [a for n in sorted(names - {"k3s", "konnectivity"}) for a in ("--disable-plugin", n)]

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "noderole", "--root", str(root.path), *disabled, *args],
            capture_output=True,
            text=True,
            timeout=110,
            env={**os.environ, "NODEROLE_ROOT": str(root.path)},
        )
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    return run


def pids(noderole: Noderole) -> dict[str, int | None]:
    rows = json.loads(noderole("status", "server", "--json", check=False).stdout)
    return {row["name"]: row["pid"] for row in rows["services"]}


def expiring_certificate(root: ScratchRoot, days: int) -> bytes:
    """A valid konnectivity certificate (same key, CA, name and SANs) ending in ``days`` days."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca = load_certificate(root.resolve(K3S_CA_CERT))
    ca_key = serialization.load_pem_private_key(
        root.resolve(K3S_CA_KEY).read_bytes(), password=None
    )
    key = serialization.load_pem_private_key(root.resolve(KEY).read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    now = dt.datetime.now(dt.UTC)
    names: list[x509.GeneralName] = [
        x509.DNSName(SANS[0]),
        x509.IPAddress(ipaddress.ip_address(SANS[1])),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "konnectivity-server")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def renew_report(noderole: Noderole) -> dict[str, dict[str, Any]]:
    report = json.loads(noderole("renew", "--json").stdout)
    return {service["name"]: service for service in report["services"]}


class TestRenewAndReset:
    def test_renew_restarts_only_konnectivity_then_reset(
        self, root: ScratchRoot, noderole: Noderole
    ) -> None:
        """Expiring certificate: re-minted, konnectivity-server restarted, k3s untouched; then
        reset removes what noderole wrote, keeps the key and a planted file, and is idempotent."""
        noderole("apply", "server", "--json")
        before = pids(noderole)
        assert before["k3s"]
        assert before["konnectivity-server"]

        # Nothing due: renew changes nothing.
        untouched = renew_report(noderole)
        assert untouched["konnectivity-server"]["status"] == "running"
        assert pids(noderole) == before

        root.resolve(CERT).write_bytes(expiring_certificate(root, days=10))
        check = noderole("cert", "check", "--role", "server", check=False)
        assert check.returncode == 1, check.stdout + check.stderr
        assert "due: expires in 9 days (renewal window 90 days)" in check.stdout

        renewed = renew_report(noderole)
        server = renewed["konnectivity-server"]
        assert server["status"] == "restarted", server
        assert "re-minted (expires in 9 days" in server["reason"]
        assert server["minted"] == [CERT]
        assert set(renewed) == {"konnectivity-server"}
        after = pids(noderole)
        assert after["k3s"] == before["k3s"]
        assert after["konnectivity-server"] != before["konnectivity-server"]
        fresh = load_certificate(root.resolve(CERT))
        assert fresh.not_valid_after_utc - dt.datetime.now(dt.UTC) > dt.timedelta(days=300)
        assert noderole("cert", "check", "--role", "server", check=False).returncode == 0

        # Reset: a dry run lists, the reset removes those, stops every process, keeps the key.
        root.write(PLANTED, "mine: true\n")
        dry = noderole("reset", "--dry-run", "--json")
        listed = set(json.loads(dry.stdout)["removed"])
        assert "/var/lib/noderole/role" in listed
        assert "/etc/rancher/k3s/config.yaml.d/50-noderole.yaml" in listed
        assert "/run/noderole/supervisor.sock" in listed
        service_pids = [p for p in after.values() if p]
        done = json.loads(noderole("reset", "--json").stdout)
        assert set(done["stopped"]) == {"k3s", "konnectivity-server"}
        assert not set(service_pids) & set(node_processes(root))
        for path in listed - {"/var/lib/noderole"}:
            assert not os.path.lexists(root.resolve(path)), path
        assert root.read(PLANTED) == "mine: true\n"
        assert root.exists(CERT)
        assert root.exists(KEY)

        # Again: nothing left to remove; --purge takes the key and certificate.
        again = json.loads(noderole("reset", "--json").stdout)
        assert again["removed"] == []
        purged = json.loads(noderole("reset", "--purge", "--json").stdout)
        assert {CERT, KEY} <= set(purged["removed"])
        assert not root.exists(KEY)
        assert root.read(PLANTED) == "mine: true\n"


class TestScheduledRenewal:
    def test_supervised_loop_renews_without_a_reboot(
        self, root: ScratchRoot, noderole: Noderole, tmp_path: Path
    ) -> None:
        """backend = "native": the supervisor runs noderole-renew, whose loop re-mints the
        expiring certificate and restarts konnectivity-server on its own; k3s is untouched."""
        wrapper = tmp_path / "noderole"
        wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m noderole "$@"\n')
        wrapper.chmod(0o755)
        root.resolve("/bin").mkdir(parents=True, exist_ok=True)
        os.symlink("/bin/sh", root.resolve("/bin/sh"))  # the loop's shell, under the root
        config = root.read("/etc/noderole/config.toml").replace(
            "[noderole]\n",
            '[noderole]\nbackend = "native"\nrenew_interval = 1\nrenew_jitter = 0\n'
            f'noderole_path = "{wrapper}"\n',
        )
        root.write_config(config)
        report = json.loads(noderole("apply", "server", "--json").stdout)
        assert {s["name"]: s["status"] for s in report["services"]}["noderole-renew"] == "started"
        before = pids(noderole)

        root.resolve(CERT).write_bytes(expiring_certificate(root, days=10))
        renewed = eventually(
            lambda: (
                pids(noderole)["konnectivity-server"] != before["konnectivity-server"]
                and load_certificate(root.resolve(CERT)).not_valid_after_utc
                > dt.datetime.now(dt.UTC) + dt.timedelta(days=300)
            ),
            "the loop to renew the certificate",
            timeout=90,
        )
        assert renewed
        assert pids(noderole)["k3s"] == before["k3s"]
        assert "restarted: certificate" in root.read("/var/log/noderole-renew.log")
        noderole("stop")


class TestCertificateChangedOutsideTheApply:
    def test_the_restart_names_the_certificate(self, root: ScratchRoot, noderole: Noderole) -> None:
        """A certificate replaced while the service runs (minted by the init system's own
        run of the pre-start hook at boot, or by an operator) is valid, so the apply reuses
        it; the service still runs with the old one and is restarted, and the report says
        why. Before: "restarted: definition changed", when no part of it had."""
        noderole("apply", "server", "--json")
        before = pids(noderole)
        root.resolve(CERT).write_bytes(expiring_certificate(root, days=365))
        report = json.loads(noderole("apply", "server", "--json").stdout)
        server = {s["name"]: s for s in report["services"]}["konnectivity-server"]
        assert (server["status"], server["minted"]) == ("restarted", [])
        assert server["reason"] == (
            f"restarted: certificate {CERT} changed since it was started, not by this apply"
        )
        assert pids(noderole)["konnectivity-server"] != before["konnectivity-server"]
