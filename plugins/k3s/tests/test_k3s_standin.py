"""The k3s rehearsal stand-in, run for real: the CA it writes looks like k3s's, under the root."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from noderole import StandIn, WaitForPaths
from noderole.clock import SystemClock
from noderole.testing import (
    ScratchRoot,
    StandInRunner,
    load_certificate,
    serial_number,
    standins_from_plugins,
)
from noderole.waits import run_wait
from noderole_k3s import plugin as k3s_plugin
from noderole_k3s.testing import K3S_CA_CERT, K3S_CA_KEY

KUBECONFIG = "/etc/rancher/k3s/k3s.yaml"

Start = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def standin(node_root: ScratchRoot) -> Path:
    """The stand-in written where a rehearsal would put it (mode 0755)."""
    (record,) = [
        s
        for s in standins_from_plugins(("k3s", k3s_plugin))
        if isinstance(s, StandIn) and s.path == "/usr/local/bin/k3s"
    ]
    return node_root.write(record.path, record.content, mode=record.mode)


@pytest.fixture
def start(standin_runner: StandInRunner, standin: Path) -> Start:
    """Start the stand-in (``k3s ARGS``) under the root, with no start-up delay; the kit's
    runner ends every process at the end, pass or fail."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return standin_runner.start(
            ["/usr/local/bin/k3s", *args], env={"NODEROLE_K3S_STANDIN_DELAY": "0", **(env or {})}
        )

    return run


def wait_for(node_root: ScratchRoot, *paths: str) -> None:
    run_wait(WaitForPaths(paths=list(paths), timeout=30), root=node_root.root, clock=SystemClock())


def openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], check=True, capture_output=True, text=True).stdout


class TestServerStandIn:
    def test_writes_k3s_like_ca(self, node_root: ScratchRoot, start: Start) -> None:
        """CA: serial 0, CN k3s-server-ca@<time>, P-256 key stored as EC PRIVATE KEY, a CA."""
        start("server", "--config", "/etc/rancher/k3s/config.yaml")
        wait_for(node_root, K3S_CA_CERT, K3S_CA_KEY, KUBECONFIG)
        cert = str(node_root.resolve(K3S_CA_CERT))
        key = str(node_root.resolve(K3S_CA_KEY))
        assert openssl("x509", "-in", cert, "-noout", "-serial").strip() == "serial=00"
        assert serial_number(load_certificate(cert)) == 0
        subject = openssl("x509", "-in", cert, "-noout", "-subject", "-nameopt", "RFC2253")
        assert subject.strip().startswith("subject=CN=k3s-server-ca@")
        assert "CA:TRUE" in openssl("x509", "-in", cert, "-noout", "-ext", "basicConstraints")
        assert node_root.read(K3S_CA_KEY).startswith("-----BEGIN EC PRIVATE KEY-----")
        assert "prime256v1" in openssl("ec", "-in", key, "-noout", "-text")
        assert node_root.mode(K3S_CA_KEY) == 0o600
        assert "server: https://127.0.0.1:6443" in node_root.read(KUBECONFIG)

    def test_keeps_ca_across_restarts_and_stops_on_sigterm(
        self, node_root: ScratchRoot, start: Start
    ) -> None:
        """A restarted stand-in keeps the CA (as k3s does); SIGTERM ends it with status 0."""
        first = start("server")
        wait_for(node_root, KUBECONFIG)
        before = node_root.read(K3S_CA_CERT)
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
        node_root.resolve(KUBECONFIG).unlink()
        second = start("server")
        wait_for(node_root, KUBECONFIG)
        assert node_root.read(K3S_CA_CERT) == before
        assert second.poll() is None

    def test_agent_records_env_names_only(self, node_root: ScratchRoot, start: Start) -> None:
        """The agent stand-in records argv and K3S_* names, never the token's value."""
        start("agent", env={"K3S_URL": "https://s:6443", "K3S_TOKEN": "sekrit-value"})
        wait_for(node_root, "/run/k3s-agent.json")
        text = node_root.read("/run/k3s-agent.json")
        record = json.loads(text)
        assert record["argv"][1:] == ["agent"]
        assert {"K3S_TOKEN", "K3S_URL"} <= set(record["env"])
        assert "sekrit-value" not in text
        assert not node_root.exists(K3S_CA_CERT)

    def test_rejects_unknown_mode(self, start: Start) -> None:
        """Anything but server or agent exits 2 with a usage line."""
        proc = start("etcd-snapshot")
        assert proc.wait(timeout=30) == 2
