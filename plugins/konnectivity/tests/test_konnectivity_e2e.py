"""`noderole apply server` end to end under --root, with the k3s and konnectivity stand-ins.

Real processes under noderole's native supervisor: k3s's stand-in writes the CA late,
konnectivity-server waits for it, gets a certificate that openssl verifies for every SAN, runs
with the script's exact argv, is respawned when killed, is left alone by a second apply, is
restarted when its SANs (hence its certificate) change, and is gone after `noderole stop`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from noderole.testing import (
    ScratchRoot,
    end_node_processes,
    eventually,
    node_processes,
    stage_standins,
)
from noderole_k3s import plugin as k3s_plugin
from noderole_k3s.testing import K3S_CA_CERT
from noderole_konnectivity import plugin as konnectivity_plugin

pytestmark = pytest.mark.slow

FIRST_BOOT = "/etc/spinifex-eks/first-boot.env"
CERT = "/var/lib/spinifex-eks/konnectivity/tls.crt"
SANS = ["konnectivity.example.com", "127.0.0.1", "nlb.example.com"]

Noderole = Callable[..., subprocess.CompletedProcess[str]]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def other_plugins() -> list[str]:
    """Installed plugins other than ours: disabled, so the test sees only k3s and konnectivity."""
    names = {ep.name for ep in importlib.metadata.entry_points(group="noderole")}
    return sorted(names - {"k3s", "konnectivity"})


def stage(root: ScratchRoot, health_port: int) -> None:
    """Config, stand-ins (as `noderole rehearse` writes them) and first-boot values."""
    config = (
        "[noderole]\nnet_check = false\n"
        f"[konnectivity]\nhealth_port = {health_port}\nrespawn_delay = 0.2\n"
    )
    plugins = [("k3s", k3s_plugin), ("konnectivity", konnectivity_plugin)]
    staged = stage_standins(*plugins, node_root=root, pick_port=lambda: health_port)
    assert staged.settings["konnectivity"] == {"health_port": health_port}
    # The rehearsal's config.toml gives way to this test's own (a quick respawn).
    root.write_config(config)
    set_sans(root, SANS)


def set_sans(root: ScratchRoot, sans: list[str]) -> None:
    root.write_env(
        FIRST_BOOT, {"EKS_KONNECTIVITY_SANS": ",".join(sans), "EKS_KONNECTIVITY_HOST": "127.0.0.1"}
    )


@pytest.fixture
def root(node_root: ScratchRoot) -> Iterator[ScratchRoot]:
    """A node root; afterwards every process started for it is ended, pass or fail, and none
    may have outlived the supervisor's orderly shutdown."""
    yield node_root
    assert end_node_processes(node_root) == []


@pytest.fixture
def noderole(root: ScratchRoot) -> Noderole:
    """Run the noderole CLI under the root, with only our two plugins."""
    disabled = [arg for name in other_plugins() for arg in ("--disable-plugin", name)]

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


def apply(noderole: Noderole) -> dict[str, dict[str, Any]]:
    report = json.loads(noderole("apply", "server", "--json").stdout)
    return {service["name"]: service for service in report["services"]}


def status(noderole: Noderole) -> dict[str, dict[str, Any]]:
    rows = json.loads(noderole("status", "server", "--json", check=False).stdout)
    return {row["name"]: row for row in rows["services"]}


def verify(root: ScratchRoot, san: str) -> subprocess.CompletedProcess[str]:
    check = "-verify_ip" if san[0].isdigit() else "-verify_hostname"
    ca, cert = str(root.resolve(K3S_CA_CERT)), str(root.resolve(CERT))
    return subprocess.run(
        ["openssl", "verify", "-CAfile", ca, check, san, cert],
        capture_output=True,
        text=True,
    )


def respawned(noderole: Noderole, old_pid: int, deadline: float) -> int:
    """The new pid of konnectivity-server once the supervisor has brought it back."""
    while time.monotonic() < deadline:
        row = status(noderole)["konnectivity-server"]
        if row["pid"] and row["pid"] != old_pid and row["state"] in ("running", "ready"):
            return int(row["pid"])
        time.sleep(0.1)
    raise AssertionError(f"konnectivity-server was not respawned: {status(noderole)}")


class TestApplyServer:
    def test_lifecycle(self, root: ScratchRoot, noderole: Noderole) -> None:
        """Apply, respawn, idempotent re-apply, re-mint on SAN change, and stop."""
        health_port = free_port()
        stage(root, health_port)

        # First apply: k3s writes the CA late; konnectivity waits, mints and starts.
        first = apply(noderole)
        assert first["k3s"]["status"] == "started"
        server = first["konnectivity-server"]
        assert server["status"] == "started", server
        assert server["minted"] == ["/var/lib/spinifex-eks/konnectivity/tls.crt"]
        kinds = [step["kind"] for step in server["steps"]]
        assert kinds == ["directories", "directories", "wait", "certificate", "start"]
        for san in SANS:
            verdict = verify(root, san)
            assert verdict.returncode == 0, verdict.stdout + verdict.stderr
        assert verify(root, "other.example.com").returncode != 0
        # The stand-in writes its argv and first log line just after exec: apply may return first.
        argv_file = "/run/konnectivity-server.argv"
        eventually(lambda: root.exists(argv_file), f"the stand-in to write {argv_file}")
        argv = json.loads(eventually(lambda: root.read(argv_file), f"{argv_file} to be written"))
        assert argv[1:] == [
            "--logtostderr=true",
            "--uds-name=/run/konnectivity/konnectivity-server.socket",
            "--delete-existing-uds-file",
            "--cluster-cert=/var/lib/spinifex-eks/konnectivity/tls.crt",
            "--cluster-key=/var/lib/spinifex-eks/konnectivity/tls.key",
            "--server-count=1",
            "--mode=grpc",
            "--server-port=0",
            "--agent-port=8132",
            "--admin-port=8093",
            f"--health-port={health_port}",
            "--kubeconfig=/etc/rancher/k3s/k3s.yaml",
            "--authentication-audience=system:konnectivity-server",
            "--agent-namespace=kube-system",
            "--agent-service-account=konnectivity-agent",
            "--proxy-strategies=destHost,default",
        ]
        log_file = "/var/log/konnectivity-server.log"
        eventually(
            lambda: root.exists(log_file) and "serving /healthz" in root.read(log_file),
            "the stand-in's first log line",
        )

        # Killed: the supervisor brings it back.
        pid = int(server["pid"])
        os.kill(pid, signal.SIGKILL)
        pid = respawned(noderole, pid, time.monotonic() + 60)

        # Second apply with the same inputs: nothing restarted, nothing re-minted.
        cert_before = root.read(CERT)
        second = apply(noderole)
        assert second["k3s"]["status"] == "running"
        assert second["konnectivity-server"]["status"] == "running"
        assert second["konnectivity-server"]["minted"] == []
        assert second["konnectivity-server"]["pid"] == pid
        assert root.read(CERT) == cert_before

        # New SANs: the certificate is re-minted and the server restarted to read it.
        set_sans(root, [*SANS, "new.example.com"])
        third = apply(noderole)
        server = third["konnectivity-server"]
        assert server["status"] == "restarted", server
        assert "re-minted" in server["reason"]
        assert server["minted"] == ["/var/lib/spinifex-eks/konnectivity/tls.crt"]
        assert server["pid"] != pid
        assert third["k3s"]["status"] == "running"
        assert verify(root, "new.example.com").returncode == 0

        # Stop: every service process is gone.
        service_pids = [int(row["pid"]) for row in status(noderole).values() if row["pid"]]
        assert len(service_pids) == 2
        assert set(service_pids) <= set(node_processes(root))
        noderole("stop")
        assert not set(service_pids) & set(node_processes(root))
