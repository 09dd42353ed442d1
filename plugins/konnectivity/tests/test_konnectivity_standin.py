"""The konnectivity-server rehearsal stand-in, run for real: argv, /healthz, checks, SIGTERM."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from noderole import StandIn, WaitForHttp
from noderole.clock import SystemClock
from noderole.testing import (
    ScratchRoot,
    StandInRunner,
    services_from_plugins,
    standins_from_plugins,
)
from noderole.waits import run_wait
from noderole_konnectivity import plugin as konnectivity_plugin

KONNECTIVITY = ("konnectivity", konnectivity_plugin)

Start = Callable[[list[str]], subprocess.Popen[bytes]]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def port(node_root: ScratchRoot) -> int:
    """A free loopback port, configured as the health port."""
    chosen = free_port()
    node_root.write_config(f"[konnectivity]\nhealth_port = {chosen}\n")
    return chosen


@pytest.fixture
def argv(node_root: ScratchRoot, port: int) -> list[str]:
    """The service's real argv, with the stand-in in place of the binary."""
    (service,) = [
        s
        for s in services_from_plugins(KONNECTIVITY, node_root=node_root)
        if s.name == "konnectivity-server"
    ]
    assert service.command is not None
    (standin,) = [
        s
        for s in standins_from_plugins(KONNECTIVITY, node_root=node_root)
        if isinstance(s, StandIn) and s.path == service.command[0]
    ]
    assert standin.mode == 0o755
    node_root.write(standin.path, standin.content, mode=standin.mode)
    return list(service.command)


@pytest.fixture
def start(standin_runner: StandInRunner) -> Start:
    """Start the stand-in under the root (the kit's runner ends every process, pass or fail)."""
    return standin_runner.start


def k3s_outputs(node_root: ScratchRoot) -> None:
    """Files the stand-in checks for, as the real server does (contents do not matter)."""
    for path in (
        "/var/lib/spinifex-eks/konnectivity/tls.crt",
        "/var/lib/spinifex-eks/konnectivity/tls.key",
        "/etc/rancher/k3s/k3s.yaml",
    ):
        node_root.write(path, "x")


class TestStandIn:
    def test_records_argv_and_answers_healthz(
        self, node_root: ScratchRoot, argv: list[str], port: int, start: Start
    ) -> None:
        """It records its argv, answers /healthz 200 ok (not /readyz), and stops on SIGTERM."""
        k3s_outputs(node_root)
        proc = start(argv)
        url = f"http://127.0.0.1:{port}/healthz"
        run_wait(WaitForHttp(url=url, timeout=30), root=node_root.root, clock=SystemClock())
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert (answer.status, answer.read()) == (200, b"ok")
        with pytest.raises(urllib.error.HTTPError) as readyz:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10)
        assert readyz.value.code == 500
        readyz.value.close()
        recorded = json.loads(node_root.read("/run/konnectivity-server.argv"))
        assert recorded[1:] == argv[1:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout is not None
        assert b"serving /healthz" in proc.stdout.read()

    def test_refuses_to_start_without_certificate(self, argv: list[str], start: Start) -> None:
        """Like the real server, it exits 1 when the cluster certificate is missing."""
        proc = start(argv)
        assert proc.wait(timeout=30) == 1
        assert proc.stderr is not None
        assert b"--cluster-cert" in proc.stderr.read()

    def test_refuses_uds_with_server_port(
        self, node_root: ScratchRoot, argv: list[str], start: Start
    ) -> None:
        """--uds-name with a server port other than 0 exits 1, as konnectivity-server does."""
        k3s_outputs(node_root)
        changed = [a if a != "--server-port=0" else "--server-port=8090" for a in argv]
        assert start(changed).wait(timeout=30) == 1
