"""One probe library for pre-start waits and readiness checks: the drifts that were unified.

Before, readiness checks (the daemon's own code) dropped ``readable``, followed HTTP redirects
that waits did not, and gave an HTTP attempt 1 s where a wait gave 2 s. Now both run the probes
of ``noderole/supervisor/probes.py``.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from noderole.backends.native import process_spec
from noderole.records import Service, WaitForCommand, WaitForHttp, WaitForPaths
from noderole.root import NodeRoot
from noderole.supervisor import ReadinessSpec, SupervisionSpec, probes
from noderole.waits import missing, probe_for
from tests.supervisor_fixtures import Harness, harness

__all__ = ["harness"]

SLEEP = "exec sleep 1000"


class _Redirect(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/ok":
            self.send_response(200)
            self.end_headers()
            return
        self.send_response(302)
        self.send_header("Location", "/ok")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def redirecting_url() -> Iterator[str]:
    """A URL that answers 302 to a page that answers 200."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/healthz"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


class TestSameProbe:
    def test_readiness_is_the_waits_probe(self, tmp_path: Path) -> None:
        """A service's readiness probe is exactly the probe its wait record gives a wait."""
        root = NodeRoot(tmp_path)
        wait = WaitForPaths(paths=["/etc/x"], timeout=3, readable=True)
        service = Service(name="a", command=["/bin/a"], readiness=wait)
        spec = process_spec(service, root=root, fingerprint="f")
        assert spec.readiness == ReadinessSpec(probe=probe_for(wait, root), timeout=3.0)
        assert isinstance(spec.readiness.probe, probes.PathProbe)
        assert spec.readiness.probe.readable is True

    def test_command_runs_the_roots_tool_or_the_machines(self, tmp_path: Path) -> None:
        """argv[0] is the root's own when it holds it, else the machine's, for both users."""
        root = NodeRoot(tmp_path)
        wait = WaitForCommand(argv=["/bin/sh", "-c", "true"], timeout=3)
        probe = probe_for(wait, root)
        assert isinstance(probe, probes.CommandProbe)
        assert probe.argv[0] == "/bin/sh"
        service = Service(name="a", command=["/bin/a"], readiness=wait)
        spec = process_spec(service, root=root, fingerprint="f")
        assert spec.readiness is not None
        assert spec.readiness.probe == probe

    def test_supervision_is_carried_over(self, tmp_path: Path) -> None:
        """The service's Supervision record becomes the spec's SupervisionSpec, field by field."""
        from noderole.records import Supervision

        sup = Supervision(respawn_delay=0.5, respawn_max=3, respawn_period=60, stop_timeout=2)
        service = Service(name="a", command=["/bin/a"], supervision=sup)
        spec = process_spec(service, root=NodeRoot(tmp_path), fingerprint="f")
        assert spec.supervision == SupervisionSpec(
            respawn_delay=0.5, respawn_max=3, respawn_period=60, stop_timeout=2
        )


class TestReadable:
    def test_unreadable_file_is_not_there(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """readable=True: a file this process may not read does not count (as [ -r ])."""
        real = os.access

        def access(path: str | os.PathLike[str], mode: int, **kwargs: object) -> bool:
            if mode == os.R_OK and os.path.isfile(path):  # as for a non-root user
                return bool(os.stat(path).st_mode & stat.S_IRUSR)
            return real(path, mode)

        monkeypatch.setattr(os, "access", access)
        secret = tmp_path / "key"
        secret.write_text("x")
        secret.chmod(0)
        outcome = probes.attempt(probes.PathProbe(paths=(str(secret),)), left=1)
        assert outcome == probes.Outcome(
            done=False, missing=(f"{secret} (not readable)",), watch=(str(secret),)
        )
        relaxed = probes.PathProbe(paths=(str(secret),), readable=False)
        assert probes.attempt(relaxed, left=1).done


class TestRedirects:
    def test_wait_does_not_follow(self, tmp_path: Path, redirecting_url: str) -> None:
        """A wait on a URL that redirects is not satisfied: HTTP 302."""
        wait = WaitForHttp(url=redirecting_url, timeout=1)
        assert missing(wait, root=NodeRoot(tmp_path)) == [f"{redirecting_url} (HTTP 302)"]

    def test_readiness_does_not_follow(self, harness: Harness, redirecting_url: str) -> None:
        """Readiness on a URL that redirects is not passed either (it used to be)."""
        check = ReadinessSpec(probe=probes.HttpProbe(url=redirecting_url), timeout=0.3)
        status = harness.supervisor.start(
            harness.spec("a", SLEEP, readiness=check), wait_ready=True
        )
        assert status.state == "running"
        assert status.reason == f"not ready after 0.3s: {redirecting_url} (HTTP 302)"


class TestTimeouts:
    def test_attempt_is_bounded_by_the_time_left(self, silent_port: int) -> None:
        """A server that never answers costs one attempt of at most the time left: timed out."""
        url = f"http://127.0.0.1:{silent_port}/"
        outcome = probes.attempt(probes.HttpProbe(url=url), left=0.1)
        assert outcome == probes.Outcome(done=False, missing=(f"{url} (timed out)",))

    def test_readiness_reason_names_the_hang(self, harness: Harness, silent_port: int) -> None:
        """Readiness against a silent server ends at its timeout, saying what timed out."""
        url = f"http://127.0.0.1:{silent_port}/"
        check = ReadinessSpec(probe=probes.HttpProbe(url=url), timeout=0.3)
        status = harness.supervisor.start(
            harness.spec("a", SLEEP, readiness=check), wait_ready=True
        )
        assert status.state == "running"
        assert status.reason.startswith("not ready after 0.3s")


class TestEndAttempts:
    def test_attempts_of_other_threads_are_ended_on_the_way_out(self, tmp_path: Path) -> None:
        """``noderole`` leaves through ``os._exit`` (Ctrl-C, an error) while an apply's threads
        wait on command attempts, each in a session of its own: end_attempts kills them, and
        each waiting thread gets its answer (killed) instead of an orphan living on."""
        from noderole.testing import eventually

        marker = tmp_path / "attempt.pid"
        probe = probes.CommandProbe(
            argv=("/bin/sh", "-c", f"echo $$ > {marker}; exec sleep 300"), shown=("sleeper",)
        )
        outcomes: list[probes.Outcome] = []
        thread = threading.Thread(
            target=lambda: outcomes.append(probes.attempt(probe, left=300)), daemon=True
        )
        thread.start()
        pid = None
        try:
            pid = int(
                eventually(lambda: marker.exists() and marker.read_text(), "its pid", timeout=10)
            )
            probes.end_attempts()
            thread.join(30)
            assert outcomes
            assert not outcomes[0].done
            assert outcomes[0].missing == ("`sleeper` (exit -9)",)
            assert not os.path.exists(f"/proc/{pid}")  # killed and reaped by its waiter
        finally:
            probes.end_attempts()  # even when the pid never showed
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)


class TestWire:
    @pytest.mark.parametrize(
        "probe",
        [
            probes.PathProbe(paths=("/a", "/b"), require="any", readable=False, labels=("a", "b")),
            probes.SocketProbe(path="/s", label="/n"),
            probes.TcpProbe(host="::1", port=80),
            probes.HttpProbe(url="https://x/healthz"),
            probes.CommandProbe(argv=("/bin/true",), shown=("true",)),
        ],
    )
    def test_round_trip(self, probe: probes.Probe) -> None:
        """Every probe crosses the control socket unchanged."""
        assert probes.probe_from_wire(probes.probe_to_wire(probe)) == probe

    @pytest.mark.parametrize(
        ("wire", "named"),
        [
            ({"kind": "tcp", "host": "h", "port": 70000}, "port"),
            ({"kind": "tcp", "host": "h", "port": True}, "port"),
            ({"kind": "paths", "paths": "/etc/x"}, "paths"),
            ({"kind": "paths", "paths": ["/a"], "require": "some"}, "require"),
            ({"kind": "http", "url": "ftp://x"}, "url"),
            ({"kind": "command", "argv": []}, "argv"),
            ({"kind": "tcp", "host": "h", "port": 1, "extra": 1}, "extra"),
        ],
    )
    def test_bad_wire_names_the_key(self, wire: dict[str, object], named: str) -> None:
        """A malformed probe is refused naming the key at fault."""
        with pytest.raises(ValueError, match=named):
            probes.probe_from_wire(wire)
