"""One probe library for pre-start waits and readiness checks: the drifts that were unified.

Before, readiness checks (the daemon's own code) dropped ``readable``, followed HTTP redirects
that waits did not, and gave an HTTP attempt 1 s where a wait gave 2 s. Now both run the probes
of ``noderole/supervisor/probes.py``.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
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


# A child in private mount and network namespaces: a UDP socket on 127.0.0.1:53 that never
# answers, and a resolv.conf naming it bind-mounted over /etc/resolv.conf (the namespace's view
# only), so that glibc's resolver waits its own timeout (30 s here) for any name, as it does
# at a boot whose DNS is down. It prints what each try said, and the resolver threads it saw.
_SILENT_DNS = r"""
import json, socket, subprocess, sys, threading
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
silent.bind(("127.0.0.1", 53))
conf = sys.argv[1] + "/resolv.conf"
with open(conf, "w") as file:
    file.write("nameserver 127.0.0.1\noptions timeout:30 attempts:1\n")
subprocess.run(["mount", "--bind", conf, "/etc/resolv.conf"], check=True)
from noderole.supervisor import probes
host = "db.noderole-test.example"
tries = [
    probes.TcpProbe(host=host, port=5432),
    probes.TcpProbe(host=host, port=5432),
    probes.TcpProbe(host=host, port=5432),
    probes.HttpProbe(url=f"http://{host}:8080/healthz"),
    probes.TcpProbe(host="127.0.0.1", port=9),
]
said = [list(probes.attempt(probe, left=0.2).missing) for probe in tries]
resolving = sorted(t.name for t in threading.enumerate() if t.name.startswith("resolve"))
print(json.dumps({"said": said, "resolving": resolving}))
"""


class TestResolution:
    """With DNS down at boot, glibc's resolver waits its own timeouts (seconds per query, per
    nameserver) before it fails; a try must still end by its deadline, so a wait does too."""

    def test_a_silent_nameserver_costs_a_try_its_own_time_only(self, tmp_path: Path) -> None:
        from tests.test_hardening import _unshare_works

        why = _unshare_works()
        if why is not None or shutil.which("ip") is None:
            pytest.skip(why or "needs ip (iproute2)")
        done = subprocess.run(
            ["unshare", "-mn", "--propagation", "private", sys.executable, "-c", _SILENT_DNS,
             str(tmp_path)],
            capture_output=True, text=True, timeout=60, cwd=Path(__file__).parent.parent,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        tcp = "tcp db.noderole-test.example:5432 (name resolution timed out)"
        http = "http://db.noderole-test.example:8080/healthz (name resolution timed out)"
        assert result["said"][:4] == [[tcp], [tcp], [tcp], [http]]
        # An address needs no resolver: the try goes on to the connection.
        assert result["said"][4] == ["tcp 127.0.0.1:9 (connection refused)"]
        # One resolution per host and port at a time: later tries wait on it, not on more.
        assert result["resolving"] == [
            "resolve db.noderole-test.example",
            "resolve db.noderole-test.example",
        ]

    def test_without_a_thread_the_name_is_resolved_in_the_try(
        self, refuse_threads: Callable[[str], None]
    ) -> None:
        """Where no thread can be started, the try resolves the name itself (unbounded, as
        before) rather than fail."""
        refuse_threads("resolve")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]  # bound, not listening: refused
            outcome = probes.attempt(probes.TcpProbe(host="localhost", port=port), left=1.0)
        assert not outcome.done
        assert outcome.missing[0].startswith(f"tcp localhost:{port} (")
        assert "name resolution" not in outcome.missing[0]
        assert "refused" in outcome.missing[0]


class TestEndAttempts:
    @pytest.fixture(autouse=True)
    def _staying(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """end_attempts marks the process as leaving; this one (pytest's) stays."""
        monkeypatch.setattr(probes, "_leaving", False)

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
            # Killed while its thread waited on it; or, on a loaded machine, killed by that
            # thread itself, which had not yet come back from starting it (the attempt runs,
            # and writes its pid, before Popen returns) and found the process leaving.
            assert outcomes[0].missing in (("`sleeper` (exit -9)",), ("`sleeper` (cancelled)",))
            assert not os.path.exists(f"/proc/{pid}")  # killed and reaped by its waiter
        finally:
            probes.end_attempts()  # even when the pid never showed
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)

    def test_no_attempt_starts_once_leaving(self, tmp_path: Path) -> None:
        """A thread whose attempt was just killed may try again before ``os._exit`` comes:
        once end_attempts has run, nothing starts, and the try says it was cancelled."""
        marker = tmp_path / "ran"
        assert probes.end_attempts() is True  # nothing was being started
        outcome = probes.attempt(
            probes.CommandProbe(argv=("/bin/sh", "-c", f": > {marker}"), shown=("toucher",)),
            left=30,
        )
        assert outcome.missing == ("`toucher` (cancelled)",)
        assert not marker.exists()

    def test_a_callers_own_interrupt_handler_is_left_alone(self) -> None:
        """Only Python's own SIGINT handler is held while an attempt starts; an embedder's
        stays in place, and is in place after."""
        import signal

        def own(number: int, frame: object) -> None:
            pass

        previous = signal.signal(signal.SIGINT, own)
        try:
            outcome = probes.attempt(probes.CommandProbe(argv=("true",)), left=30)
            assert outcome.done
            assert signal.getsignal(signal.SIGINT) is own
        finally:
            signal.signal(signal.SIGINT, previous)
        outcome = probes.attempt(probes.CommandProbe(argv=("true",)), left=30)
        assert outcome.done
        assert signal.getsignal(signal.SIGINT) is previous  # held, and put back


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
            ({"kind": "http", "url": "http://h:99999/"}, "url"),
            ({"kind": "http", "url": "http://[::1/"}, "url"),
            ({"kind": "command", "argv": []}, "argv"),
            ({"kind": "tcp", "host": "h", "port": 1, "extra": 1}, "extra"),
        ],
    )
    def test_bad_wire_names_the_key(self, wire: dict[str, object], named: str) -> None:
        """A malformed probe is refused naming the key at fault."""
        with pytest.raises(ValueError, match=named):
            probes.probe_from_wire(wire)
