"""The k3s rehearsal stand-in, run for real: the CA it writes looks like k3s's, under the root."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from noderole.clock import SystemClock
from noderole.context import NodeContext
from noderole.plugins import PluginSet
from noderole.records import WaitForPaths
from noderole.root import NodeRoot
from noderole.waits import run_wait

CA = "/var/lib/rancher/k3s/server/tls/server-ca.crt"
CA_KEY = "/var/lib/rancher/k3s/server/tls/server-ca.key"
KUBECONFIG = "/etc/rancher/k3s/k3s.yaml"

Start = Callable[..., subprocess.Popen[bytes]]
MakeNode = Callable[..., tuple[PluginSet, NodeContext]]


@pytest.fixture
def standin(tmp_path: Path, make_node: MakeNode) -> Path:
    """The stand-in written where a rehearsal would put it (mode 0755)."""
    plugins, node = make_node()
    (record,) = [s for s in plugins.standins(node) if s.path == "/usr/local/bin/k3s"]
    local = tmp_path / record.path.lstrip("/")
    local.parent.mkdir(parents=True)
    local.write_text(record.content)
    local.chmod(0o755)
    return local


@pytest.fixture
def start(tmp_path: Path, standin: Path) -> Iterator[Start]:
    """Start the stand-in under the root; every process is killed at the end, pass or fail."""
    started: list[subprocess.Popen[bytes]] = []

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        environment = {
            **os.environ,
            "NODEROLE_ROOT": str(tmp_path),
            "NODEROLE_K3S_STANDIN_DELAY": "0",
            **(env or {}),
        }
        proc = subprocess.Popen(
            [sys.executable, str(standin), *args],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        started.append(proc)
        return proc

    yield run
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def wait_for(root: Path, *paths: str) -> None:
    run_wait(WaitForPaths(paths=list(paths), timeout=30), root=NodeRoot(root), clock=SystemClock())


def openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], check=True, capture_output=True, text=True).stdout


class TestServerStandIn:
    def test_writes_k3s_like_ca(self, tmp_path: Path, start: Start) -> None:
        """CA: serial 0, CN k3s-server-ca@<time>, P-256 key stored as EC PRIVATE KEY, a CA."""
        start("server", "--config", "/etc/rancher/k3s/config.yaml")
        wait_for(tmp_path, CA, CA_KEY, KUBECONFIG)
        cert = str(tmp_path / CA.lstrip("/"))
        key = tmp_path / CA_KEY.lstrip("/")
        assert openssl("x509", "-in", cert, "-noout", "-serial").strip() == "serial=00"
        subject = openssl("x509", "-in", cert, "-noout", "-subject", "-nameopt", "RFC2253")
        assert subject.strip().startswith("subject=CN=k3s-server-ca@")
        assert "CA:TRUE" in openssl("x509", "-in", cert, "-noout", "-ext", "basicConstraints")
        assert key.read_text().startswith("-----BEGIN EC PRIVATE KEY-----")
        assert "prime256v1" in openssl("ec", "-in", str(key), "-noout", "-text")
        assert oct(key.stat().st_mode & 0o777) == "0o600"
        kubeconfig = (tmp_path / KUBECONFIG.lstrip("/")).read_text()
        assert "server: https://127.0.0.1:6443" in kubeconfig

    def test_keeps_ca_across_restarts_and_stops_on_sigterm(
        self, tmp_path: Path, start: Start
    ) -> None:
        """A restarted stand-in keeps the CA (as k3s does); SIGTERM ends it with status 0."""
        first = start("server")
        wait_for(tmp_path, KUBECONFIG)
        before = (tmp_path / CA.lstrip("/")).read_bytes()
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
        (tmp_path / KUBECONFIG.lstrip("/")).unlink()
        second = start("server")
        wait_for(tmp_path, KUBECONFIG)
        assert (tmp_path / CA.lstrip("/")).read_bytes() == before
        assert second.poll() is None

    def test_agent_records_env_names_only(self, tmp_path: Path, start: Start) -> None:
        """The agent stand-in records argv and K3S_* names, never the token's value."""
        start("agent", env={"K3S_URL": "https://s:6443", "K3S_TOKEN": "sekrit-value"})
        wait_for(tmp_path, "/run/k3s-agent.json")
        text = (tmp_path / "run/k3s-agent.json").read_text()
        record = json.loads(text)
        assert record["argv"][1:] == ["agent"]
        assert {"K3S_TOKEN", "K3S_URL"} <= set(record["env"])
        assert "sekrit-value" not in text
        assert not (tmp_path / CA.lstrip("/")).exists()

    def test_rejects_unknown_mode(self, start: Start) -> None:
        """Anything but server or agent exits 2 with a usage line."""
        proc = start("etcd-snapshot")
        assert proc.wait(timeout=30) == 2
