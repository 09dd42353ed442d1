"""The konnectivity-server rehearsal stand-in, run for real: argv, /healthz, checks, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from noderole.clock import SystemClock
from noderole.context import NodeContext
from noderole.plugins import PluginSet
from noderole.records import WaitForHttp
from noderole.root import NodeRoot
from noderole.waits import run_wait

MakeNode = Callable[..., tuple[PluginSet, NodeContext]]
Start = Callable[[list[str]], subprocess.Popen[bytes]]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def port(put: Callable[[str, str], Path]) -> int:
    """A free loopback port, configured as the health port."""
    chosen = free_port()
    put("/etc/noderole/config.toml", f"[konnectivity]\nhealth_port = {chosen}\n")
    return chosen


@pytest.fixture
def argv(make_node: MakeNode, port: int) -> list[str]:
    """The service's real argv, with the stand-in in place of the binary."""
    plugins, node = make_node(k3s=False)
    (service,) = [s for s in plugins.services(node) if s.name == "konnectivity-server"]
    assert service.command is not None
    (standin,) = [s for s in plugins.standins(node) if s.path == service.command[0]]
    local = node.resolve(standin.path)
    local.parent.mkdir(parents=True)
    local.write_text(standin.content)
    local.chmod(0o755)
    return list(service.command)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """Start the stand-in under the root; every process is killed at the end, pass or fail."""
    started: list[subprocess.Popen[bytes]] = []

    def run(command: list[str]) -> subprocess.Popen[bytes]:
        local = str(tmp_path / command[0].lstrip("/"))
        proc = subprocess.Popen(
            [sys.executable, local, *command[1:]],
            env={**os.environ, "NODEROLE_ROOT": str(tmp_path)},
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


def k3s_outputs(root: Path) -> None:
    for path in (
        "var/lib/spinifex-eks/konnectivity/tls.crt",
        "var/lib/spinifex-eks/konnectivity/tls.key",
        "etc/rancher/k3s/k3s.yaml",
    ):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x")


class TestStandIn:
    def test_records_argv_and_answers_healthz(
        self, tmp_path: Path, argv: list[str], port: int, start: Start
    ) -> None:
        """It records its argv, answers /healthz 200 ok (not /readyz), and stops on SIGTERM."""
        k3s_outputs(tmp_path)
        proc = start(argv)
        url = f"http://127.0.0.1:{port}/healthz"
        run_wait(WaitForHttp(url=url, timeout=30), root=NodeRoot(tmp_path), clock=SystemClock())
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert (answer.status, answer.read()) == (200, b"ok")
        with pytest.raises(urllib.error.HTTPError) as readyz:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10)
        assert readyz.value.code == 500
        readyz.value.close()
        recorded = json.loads((tmp_path / "run/konnectivity-server.argv").read_text())
        assert recorded[1:] == argv[1:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout is not None
        assert b"serving /healthz" in proc.stdout.read()

    def test_refuses_to_start_without_certificate(
        self, tmp_path: Path, argv: list[str], start: Start
    ) -> None:
        """Like the real server, it exits 1 when the cluster certificate is missing."""
        proc = start(argv)
        assert proc.wait(timeout=30) == 1
        assert proc.stderr is not None
        assert b"--cluster-cert" in proc.stderr.read()

    def test_refuses_uds_with_server_port(
        self, tmp_path: Path, argv: list[str], start: Start
    ) -> None:
        """--uds-name with a server port other than 0 exits 1, as konnectivity-server does."""
        k3s_outputs(tmp_path)
        changed = [a if a != "--server-port=0" else "--server-port=8090" for a in argv]
        assert start(changed).wait(timeout=30) == 1
