"""Bounded waits: event-driven for paths, polled for sockets, ports, URLs and commands."""

from __future__ import annotations

import contextlib
import http.server
import itertools
import os
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from noderole import waits
from noderole.cli._app import App
from noderole.cli._wait import wait as wait_command
from noderole.clock import FakeClock, SystemClock
from noderole.errors import UsageError, WaitTimeout
from noderole.records import (
    Wait,
    WaitForCommand,
    WaitForHttp,
    WaitForPaths,
    WaitForSocket,
    WaitForTcp,
)
from noderole.root import NodeRoot
from noderole.supervisor import probes
from noderole.waits import missing, run_wait

CA_KEY = "/var/lib/rancher/k3s/server/tls/server-ca.key"
KUBECONFIG = "/etc/rancher/k3s/k3s.yaml"
GENEROUS = 30.0
"""Timeout for real-clock waits: long enough never to fire on a loaded CI machine."""


@pytest.fixture
def root(tmp_path: Path) -> NodeRoot:
    return NodeRoot(tmp_path)


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=24) as executor:
        yield executor


@pytest.fixture
def later() -> Iterator[Callable[..., None]]:
    """Run a function on a timer thread after a short moment; timers are cancelled at the end."""
    timers: list[threading.Timer] = []

    def schedule(function: Callable[[], object], delay: float = 0.05) -> None:
        timer = threading.Timer(delay, function)
        timers.append(timer)
        timer.start()

    yield schedule
    for timer in timers:
        timer.cancel()
        timer.join()


def touch(root: NodeRoot, node_path: str) -> None:
    local = root.resolve(node_path)
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text("x")


def wait_in_thread(pool: ThreadPoolExecutor, wait: Wait, root: NodeRoot) -> Future[float]:
    return pool.submit(run_wait, wait, root=root, clock=SystemClock())


def inotify_fds() -> int:
    """Open inotify descriptors of this process (other descriptors come and go with other tests)."""
    assert waits.flush_closes(), "inotify descriptors still closing after 10 s"
    count = 0
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{name}") == "anon_inode:inotify"
    return count


def paths_wait(*paths: str, timeout: float = GENEROUS, **kwargs: object) -> WaitForPaths:
    return WaitForPaths(paths=paths, timeout=timeout, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def access_by_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make os.access judge readability by mode bits, as for a non-root user (tests run as root)."""
    real = os.access

    def access(path: str | os.PathLike[str], mode: int, **kwargs: object) -> bool:
        if mode == os.R_OK and os.path.isfile(path):
            return bool(os.stat(path).st_mode & stat.S_IRUSR)
        return real(path, mode)

    monkeypatch.setattr(os, "access", access)


class TestTimeout:
    def test_fake_clock_times_out_120s_at_once(self, root: NodeRoot) -> None:
        """A 120 s wait on a FakeClock fails without sleeping, saying 'after 120s' and what."""
        clock = FakeClock()
        start = clock.monotonic()
        with pytest.raises(WaitTimeout) as caught:
            run_wait(paths_wait(CA_KEY, timeout=120), root=root, clock=clock)
        assert str(caught.value) == f"still missing after 120s: {CA_KEY}"
        assert clock.monotonic() - start == pytest.approx(120)

    def test_seed_message_is_filled_in(self, root: NodeRoot) -> None:
        """The record's message gets {elapsed} in whole seconds and {missing}."""
        wait = paths_wait(
            CA_KEY,
            KUBECONFIG,
            timeout=120,
            message="k3s server CA / admin kubeconfig not present after {elapsed}s ({missing})",
        )
        with pytest.raises(WaitTimeout) as caught:
            run_wait(wait, root=root, clock=FakeClock())
        assert str(caught.value) == (
            f"k3s server CA / admin kubeconfig not present after 120s ({CA_KEY}, {KUBECONFIG})"
        )

    def test_message_with_stray_braces_is_kept(self, root: NodeRoot) -> None:
        """A message with an unknown placeholder is shown as written, with the facts appended."""
        wait = paths_wait("/x", timeout=5, message="no {thing} here")
        with pytest.raises(WaitTimeout, match=r"^no \{thing\} here \(5s; missing: /x\)$"):
            run_wait(wait, root=root, clock=FakeClock())

    def test_all_names_only_the_absent_path(self, root: NodeRoot) -> None:
        """With require=all, the message names only the paths still missing."""
        touch(root, KUBECONFIG)
        with pytest.raises(WaitTimeout, match=rf"^still missing after 10s: {CA_KEY}$"):
            run_wait(paths_wait(CA_KEY, KUBECONFIG, timeout=10), root=root, clock=FakeClock())

    def test_any_none_present(self, root: NodeRoot) -> None:
        """With require=any and none there, the message says none is present."""
        wait = paths_wait("/a", "/b", timeout=3, require="any")
        with pytest.raises(WaitTimeout, match=r"^none present after 3s: /a, /b$"):
            run_wait(wait, root=root, clock=FakeClock())

    def test_unreadable_is_named(self, root: NodeRoot, access_by_mode: None) -> None:
        """A path that exists but cannot be read is named '(not readable)'."""
        touch(root, CA_KEY)
        root.resolve(CA_KEY).chmod(0)
        with pytest.raises(WaitTimeout, match=rf"after 2s: {CA_KEY} \(not readable\)$"):
            run_wait(paths_wait(CA_KEY, timeout=2), root=root, clock=FakeClock())

    def test_tcp_timeout_names_endpoint(self, root: NodeRoot, closed_port: int) -> None:
        """A TCP wait on a port nobody listens on fails naming the endpoint and the refusal."""
        wait = WaitForTcp(host="127.0.0.1", port=closed_port, timeout=1)
        with pytest.raises(WaitTimeout) as caught:
            run_wait(wait, root=root, clock=FakeClock())
        assert str(caught.value) == (
            f"still not ready after 1s: tcp 127.0.0.1:{closed_port} (connection refused)"
        )


class TestPathsNow:
    def test_present_returns_without_progress(self, root: NodeRoot) -> None:
        """Paths already there: returns 0 s waited and reports no progress."""
        touch(root, KUBECONFIG)
        seen: list[str] = []
        clock = FakeClock()
        assert run_wait(paths_wait(KUBECONFIG), root=root, clock=clock, progress=seen.append) == 0
        assert seen == []

    def test_progress_reported_once(self, root: NodeRoot) -> None:
        """A blocking wait reports once what it waits for."""
        seen: list[str] = []
        with pytest.raises(WaitTimeout):
            run_wait(
                paths_wait(KUBECONFIG, timeout=5),
                root=root,
                clock=FakeClock(),
                progress=seen.append,
            )
        assert seen == [f"waiting for {KUBECONFIG} (up to 5s)"]

    @pytest.mark.parametrize("every", [1e-14, 1e-300, 0.001])
    def test_an_interval_below_the_clocks_resolution_keeps_the_bound(
        self, root: NodeRoot, every: float
    ) -> None:
        """`progress_interval = 1e-12` in config.toml: the next report time never moved past
        the clock (a step below its resolution), and the wait spun at full CPU for good,
        whatever its timeout; 0.001 printed a line every millisecond. A line comes at most
        once a second (MIN_PROGRESS_EVERY), and the wait ends at its bound. The wait runs in a
        thread so that a regression fails the test instead of hanging the suite."""
        from noderole.waits import MIN_PROGRESS_EVERY

        seen: list[str] = []
        outcome: list[BaseException] = []

        def wait() -> None:
            try:
                run_wait(
                    paths_wait(KUBECONFIG, timeout=5),
                    root=root,
                    clock=FakeClock(),
                    progress=seen.append,
                    progress_every=every,
                )
            except BaseException as error:  # what the wait ended with, checked below
                outcome.append(error)

        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the wait never ended"
        assert [type(error) for error in outcome] == [WaitTimeout]
        assert MIN_PROGRESS_EVERY == 1.0
        assert len(seen) == 1 + 5  # the first line, then one a second

    def test_any_satisfied_by_one(self, root: NodeRoot) -> None:
        """require=any returns as soon as one path is there."""
        touch(root, "/b")
        wait = paths_wait("/a", "/b", require="any", timeout=5)
        assert run_wait(wait, root=root, clock=FakeClock()) == 0

    def test_exists_only_ignores_readability(self, root: NodeRoot, access_by_mode: None) -> None:
        """readable=False accepts a path that exists but cannot be read."""
        touch(root, CA_KEY)
        root.resolve(CA_KEY).chmod(0)
        assert run_wait(paths_wait(CA_KEY, readable=False), root=root, clock=FakeClock()) == 0

    def test_paths_resolve_under_root(self, root: NodeRoot, tmp_path: Path) -> None:
        """Node paths are looked up under the root, not on the machine."""
        (tmp_path / "etc").mkdir()
        (tmp_path / "etc/hostname").write_text("node")
        assert run_wait(paths_wait("/etc/hostname"), root=root, clock=FakeClock()) == 0
        with pytest.raises(WaitTimeout):
            run_wait(paths_wait("/etc/passwd", timeout=1), root=root, clock=FakeClock())


FIRST_LOOK = """
import sys
from noderole.clock import FakeClock
from noderole.errors import WaitTimeout
from noderole.records import WaitForPaths
from noderole.root import NodeRoot
from noderole.waits import run_wait

root = NodeRoot(sys.argv[1])
print(run_wait(WaitForPaths(paths=["/etc/a", "/etc/b"], timeout=5), root=root, clock=FakeClock()))
print("noderole.supervisor.probes" in sys.modules)
try:
    run_wait(WaitForPaths(paths=["/etc/a", "/etc/c"], timeout=5), root=root, clock=FakeClock())
except WaitTimeout as error:
    print(error)
print("noderole.supervisor.probes" in sys.modules)
"""


class TestFirstLook:
    def test_paths_there_answer_without_the_probes(self, root: NodeRoot, tmp_path: Path) -> None:
        """A path wait satisfied at its first look (every re-apply's) returns without importing
        the probes module; one that has to look again imports it and times out as before."""
        touch(root, "/etc/a")
        touch(root, "/etc/b")
        done = subprocess.run(
            [sys.executable, "-c", FIRST_LOOK, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert done.stdout.splitlines() == [
            "0.0",
            "False",
            "still missing after 5s: /etc/c",
            "True",
        ]

    def test_first_look_agrees_with_the_probe(
        self, root: NodeRoot, tmp_path: Path, access_by_mode: None
    ) -> None:
        """For every mix of present, missing and unreadable paths, ``require`` and ``readable``,
        the first look says "there" exactly when the wait's probe says so."""
        touch(root, "/present")
        touch(root, "/unreadable")
        root.resolve("/unreadable").chmod(0)
        states = ("/present", "/missing", "/unreadable")
        for paths in itertools.chain.from_iterable(
            itertools.product(states, repeat=n) for n in (1, 2, 3)
        ):
            for require, readable in itertools.product(("all", "any"), (True, False)):
                wait = paths_wait(*paths, require=require, readable=readable)
                probe = probes.attempt(waits.probe_for(wait, root), left=1.0)
                assert waits._paths_there(wait, root) == probe.done, (paths, require, readable)


@pytest.fixture
def events_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn off the once-a-second safety re-check, so only an inotify event can end a wait."""
    monkeypatch.setattr(waits, "SAFETY_RECHECK", 3600.0)


@pytest.mark.usefixtures("events_only")
class TestPathsEvents:
    def test_file_created_later(
        self, root: NodeRoot, pool: ThreadPoolExecutor, later: Callable[..., None]
    ) -> None:
        """A file created by another thread ends the wait."""
        touch(root, "/etc/placeholder")
        future = wait_in_thread(pool, paths_wait("/etc/k3s.yaml"), root)
        later(lambda: touch(root, "/etc/k3s.yaml"))
        assert future.result(timeout=GENEROUS) < GENEROUS

    def test_nested_directories_created_later(
        self, root: NodeRoot, pool: ThreadPoolExecutor, later: Callable[..., None]
    ) -> None:
        """Directories that do not exist yet are followed down as they appear."""
        future = wait_in_thread(pool, paths_wait(CA_KEY, KUBECONFIG), root)
        later(lambda: touch(root, CA_KEY))
        later(lambda: touch(root, KUBECONFIG), delay=0.1)
        assert future.result(timeout=GENEROUS) < GENEROUS

    def test_all_waits_for_every_path(
        self, root: NodeRoot, pool: ThreadPoolExecutor, later: Callable[..., None]
    ) -> None:
        """require=all is still waiting after the first path appears, and ends with the second."""
        first_seen = threading.Event()
        future = pool.submit(
            run_wait,
            paths_wait("/a", "/b"),
            root=root,
            clock=SystemClock(),
            progress=lambda _: first_seen.set(),
        )
        assert first_seen.wait(GENEROUS)
        touch(root, "/a")
        assert missing(paths_wait("/a", "/b"), root=root) == ["/b"]
        assert not future.done()
        touch(root, "/b")
        assert future.result(timeout=GENEROUS) < GENEROUS

    def test_rename_into_place(
        self, root: NodeRoot, pool: ThreadPoolExecutor, later: Callable[..., None]
    ) -> None:
        """A file written elsewhere and renamed into place (atomic write) ends the wait."""
        (root.path / "etc").mkdir()

        def atomic_write() -> None:
            (root.path / "etc/.k3s.yaml.tmp").write_text("x")
            os.rename(root.path / "etc/.k3s.yaml.tmp", root.path / "etc/k3s.yaml")

        future = wait_in_thread(pool, paths_wait("/etc/k3s.yaml"), root)
        later(atomic_write)
        assert future.result(timeout=GENEROUS) < GENEROUS

    def test_dangling_symlink_target_appears(
        self, root: NodeRoot, pool: ThreadPoolExecutor, later: Callable[..., None]
    ) -> None:
        """A symlink whose target is created later, in another directory, ends the wait."""
        (root.path / "etc").mkdir()
        (root.path / "data").mkdir()
        (root.path / "etc/link").symlink_to(root.path / "data/target")
        future = wait_in_thread(pool, paths_wait("/etc/link"), root)
        later(lambda: (root.path / "data/target").write_text("x"))
        assert future.result(timeout=GENEROUS) < GENEROUS

    def test_chmod_makes_readable(
        self,
        root: NodeRoot,
        pool: ThreadPoolExecutor,
        later: Callable[..., None],
        access_by_mode: None,
    ) -> None:
        """A file made readable by chmod (an attribute event) ends the wait."""
        touch(root, CA_KEY)
        local = root.resolve(CA_KEY)
        local.chmod(0)
        future = wait_in_thread(pool, paths_wait(CA_KEY), root)
        later(lambda: local.chmod(0o600))
        assert future.result(timeout=GENEROUS) < GENEROUS

    def test_directory_path(
        self, root: NodeRoot, pool: ThreadPoolExecutor, later: Callable[..., None]
    ) -> None:
        """A directory can be waited for like a file."""
        future = wait_in_thread(pool, paths_wait("/run/konnectivity"), root)
        later(lambda: (root.path / "run/konnectivity").mkdir(parents=True))
        assert future.result(timeout=GENEROUS) < GENEROUS

    def test_without_inotify_polls(
        self,
        root: NodeRoot,
        pool: ThreadPoolExecutor,
        later: Callable[..., None],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """When no inotify descriptor can be had (limit reached), the wait polls and still ends."""
        monkeypatch.setattr(waits._Inotify, "open", classmethod(lambda cls: None))
        future = wait_in_thread(pool, paths_wait(KUBECONFIG), root)
        later(lambda: touch(root, KUBECONFIG))
        assert future.result(timeout=GENEROUS) < GENEROUS


class TestMissing:
    def test_lists_absent_paths(self, root: NodeRoot) -> None:
        """missing() names the paths not there now."""
        touch(root, "/a")
        assert missing(paths_wait("/a", "/b", "/c"), root=root) == ["/b", "/c"]

    def test_empty_when_satisfied(self, root: NodeRoot) -> None:
        """missing() is empty when the condition holds, even with require=any and one present."""
        touch(root, "/a")
        assert missing(paths_wait("/a", "/b", require="any"), root=root) == []


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound but not listening: connections are refused, and nobody else can take it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


class TestUnixSocket:
    @pytest.mark.usefixtures("events_only")
    def test_socket_appears_later(
        self, root: NodeRoot, pool: ThreadPoolExecutor, later: Callable[..., None]
    ) -> None:
        """A socket bound and listening later (its file watched first) ends the wait."""
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:

            def start() -> None:
                server.bind(os.fspath(root.resolve("/s")))
                server.listen()

            future = wait_in_thread(pool, WaitForSocket(path="/s", timeout=GENEROUS), root)
            later(start)
            assert future.result(timeout=GENEROUS) < GENEROUS
        finally:
            server.close()

    def test_bound_but_not_listening(
        self, root: NodeRoot, pool: ThreadPoolExecutor, later: Callable[..., None]
    ) -> None:
        """A socket file that refuses connections is retried until the server listens."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(os.fspath(root.resolve("/s")))
            assert missing(WaitForSocket(path="/s", timeout=1), root=root) == [
                "unix socket /s (connection refused)"
            ]
            future = wait_in_thread(pool, WaitForSocket(path="/s", timeout=GENEROUS), root)
            later(server.listen)
            assert future.result(timeout=GENEROUS) < GENEROUS

    def test_absent_socket_times_out(self, root: NodeRoot) -> None:
        """No socket file: the message says it is absent."""
        with pytest.raises(WaitTimeout, match=r"after 9s: unix socket /s \(absent\)$"):
            run_wait(WaitForSocket(path="/s", timeout=9), root=root, clock=FakeClock())


class TestTcp:
    def test_listener_starts_later(
        self, pool: ThreadPoolExecutor, root: NodeRoot, later: Callable[..., None]
    ) -> None:
        """A port that starts listening later ends the wait."""
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            port = server.getsockname()[1]
            future = wait_in_thread(
                pool, WaitForTcp(host="127.0.0.1", port=port, timeout=GENEROUS), root
            )
            later(server.listen)
            assert future.result(timeout=GENEROUS) < GENEROUS

    def test_refused_is_missing(self, root: NodeRoot, closed_port: int) -> None:
        """missing() names the endpoint and the reason."""
        wait = WaitForTcp(host="127.0.0.1", port=closed_port, timeout=1)
        assert missing(wait, root=root) == [f"tcp 127.0.0.1:{closed_port} (connection refused)"]


class _Handler(http.server.BaseHTTPRequestHandler):
    flips = 0

    def do_GET(self) -> None:
        if self.path == "/ok":
            status = 200
        elif self.path == "/flip":
            type(self).flips += 1
            status = 200 if type(self).flips > 3 else 500
        else:
            status = 500
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_base() -> Iterator[str]:
    _Handler.flips = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class TestHttp:
    def test_2xx_returns(self, root: NodeRoot, http_base: str) -> None:
        """A URL answering 200 satisfies the wait at once."""
        assert (
            run_wait(WaitForHttp(url=f"{http_base}/ok", timeout=5), root=root, clock=FakeClock())
            == 0
        )

    def test_500_times_out_naming_status(self, root: NodeRoot, http_base: str) -> None:
        """A URL answering 500 is not ready; the message gives the status."""
        wait = WaitForHttp(url=f"{http_base}/bad", timeout=0.2)
        with pytest.raises(WaitTimeout, match=rf"{http_base}/bad \(HTTP 500\)$"):
            run_wait(wait, root=root, clock=FakeClock())

    def test_retries_until_2xx(self, root: NodeRoot, http_base: str) -> None:
        """A server answering 500 a few times, then 200, ends the wait."""
        wait = WaitForHttp(url=f"{http_base}/flip", timeout=GENEROUS)
        assert run_wait(wait, root=root, clock=SystemClock()) < GENEROUS
        assert _Handler.flips == 4

    def test_no_server(self, root: NodeRoot, closed_port: int) -> None:
        """Nothing listening: missing() says the connection was refused."""
        wait = WaitForHttp(url=f"http://127.0.0.1:{closed_port}/healthz", timeout=1)
        assert missing(wait, root=root) == [
            f"http://127.0.0.1:{closed_port}/healthz (connection refused)"
        ]


class _Drip:
    """A listener that answers every connection with an endless HTTP status line, one byte
    every 50 ms for a minute: each read gets something well within any per-read timeout. With
    ``tls`` (a server context) it does so after a real TLS handshake. Closed, its threads
    ended, at the end of the test."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), contextlib.ExitStack() as stack:
            stack.enter_context(conn)
            if self.tls is not None:
                conn.settimeout(GENEROUS)
                conn = stack.enter_context(self.tls.wrap_socket(conn, server_side=True))
            source = itertools.chain(b"HTTP/1.1 200 ", itertools.repeat(ord("O")))
            deadline = time.monotonic() + 60
            for byte in source:
                if self.stop.wait(0.05) or time.monotonic() > deadline:
                    return
                conn.sendall(bytes([byte]))

    def close(self) -> None:
        self.stop.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (close alone does not)
        self.listener.close()
        for thread in self.threads:
            thread.join(GENEROUS)


@pytest.fixture
def tls_context(tmp_path: Path) -> ssl.SSLContext:
    """A server context with a self-signed certificate made by openssl."""
    key, crt = tmp_path / "tls.key", tmp_path / "tls.crt"
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", key, "-out", crt, "-days", "1", "-subj", "/CN=localhost"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    return context


@pytest.fixture
def tls_port(tls_context: ssl.SSLContext) -> Iterator[int]:
    """A real TLS server answering GETs as the plain one does."""
    context = tls_context
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _attempt_guarded(probe: probes.Probe, left: float) -> probes.Outcome:
    """One attempt, failing the test (instead of hanging it) if it outlives a generous guard."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(probes.attempt, probe, left=left)
        try:
            return future.result(timeout=GENEROUS)
        except TimeoutError:
            pytest.fail("the attempt outlived its bound by far: a dripping server held it")
            raise  # unreachable: pytest.fail raises


class TestHttpBound:
    """One HTTP attempt lasts at most its bound even when the server sends a byte now and
    then: a per-read timeout never fires then, and a local user who binds the port a wait
    watches (any port above 1023) could hold a boot's wait, and its own timeout, for ever."""

    @pytest.mark.parametrize("scheme", ["http", "https"])
    def test_a_dripping_status_line_ends_at_the_bound(
        self, scheme: str, tls_context: ssl.SSLContext
    ) -> None:
        """In clear, or after a real TLS handshake: the attempt ends at its bound, timed out."""
        drip = _Drip(tls=tls_context if scheme == "https" else None)
        url = f"{scheme}://127.0.0.1:{drip.port}/healthz"
        try:
            outcome = _attempt_guarded(probes.HttpProbe(url=url), left=0.5)
        finally:
            drip.close()
        assert not outcome.done
        assert outcome.missing == (f"{url} (timed out)",)

    def test_https_answers_through_a_real_handshake(self, tls_port: int) -> None:
        """The control: the same TLS server, undripped, answers 200 and 500 as http does."""
        ok = _attempt_guarded(probes.HttpProbe(url=f"https://127.0.0.1:{tls_port}/ok"), left=2)
        assert ok.done
        bad = _attempt_guarded(probes.HttpProbe(url=f"https://127.0.0.1:{tls_port}/bad"), left=2)
        assert bad.missing == (f"https://127.0.0.1:{tls_port}/bad (HTTP 500)",)

    def test_not_http_is_named(self) -> None:
        """A server that answers something else than an HTTP status line."""
        with socket.create_server(("127.0.0.1", 0)) as listener:
            port = listener.getsockname()[1]

            def answer() -> None:
                conn, _ = listener.accept()
                with conn:
                    conn.recv(4096)
                    conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")

            thread = threading.Thread(target=answer, daemon=True)
            thread.start()
            outcome = _attempt_guarded(probes.HttpProbe(url=f"http://127.0.0.1:{port}/"), left=2)
            thread.join(GENEROUS)
        assert outcome.missing == (f"http://127.0.0.1:{port}/ (not an HTTP response)",)


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[Path]:
    """Where a test command writes its pid; whatever still runs is killed at the end."""
    path = tmp_path / "cmd.pid"
    yield path
    if path.exists():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(path.read_text()), 9)


def alive(pid: int) -> bool:
    """True while pid runs (a zombie awaiting its reaper counts as ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


def ended_soon(pid: int) -> bool:
    """True once pid has ended; a SIGKILLed process takes a moment to finish dying."""
    for _ in range(500):
        if not alive(pid):
            return True
        time.sleep(0.01)
    return False


class TestCommand:
    def test_exit_zero_returns(self, root: NodeRoot) -> None:
        """A command that exits 0 satisfies the wait."""
        assert (
            run_wait(WaitForCommand(argv=["/bin/true"], timeout=5), root=root, clock=FakeClock())
            == 0
        )

    def test_failure_message_has_exit_and_stderr(self, root: NodeRoot) -> None:
        """A failing command times out naming its exit status and last stderr line."""
        wait = WaitForCommand(
            argv=["/bin/sh", "-c", "echo first >&2; echo not yet >&2; exit 3"], timeout=0.2
        )
        with pytest.raises(WaitTimeout, match=r"\(exit 3: not yet\)$"):
            run_wait(wait, root=root, clock=FakeClock())

    def test_succeeds_once_condition_holds(
        self, root: NodeRoot, tmp_path: Path, pool: ThreadPoolExecutor, later: Callable[..., None]
    ) -> None:
        """A command retried until it exits 0 ends the wait."""
        flag = tmp_path / "ready"
        future = wait_in_thread(
            pool, WaitForCommand(argv=["/bin/test", "-e", os.fspath(flag)], timeout=GENEROUS), root
        )
        later(flag.touch)
        assert future.result(timeout=GENEROUS) < GENEROUS

    def test_hung_command_killed_at_deadline(self, root: NodeRoot, pidfile: Path) -> None:
        """A command still running at the deadline is killed with its children."""
        wait = WaitForCommand(
            argv=["/bin/sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout=0.5
        )
        with pytest.raises(WaitTimeout, match=r"still running at the deadline"):
            run_wait(wait, root=root, clock=SystemClock())
        assert ended_soon(int(pidfile.read_text()))

    def test_executable_resolved_under_root(self, root: NodeRoot, tmp_path: Path) -> None:
        """argv[0] is a node path run from the root, which children see as NODEROLE_ROOT."""
        script = tmp_path / "usr/local/bin/ready"
        script.parent.mkdir(parents=True)
        script.write_text(f'#!/bin/sh\n[ "$NODEROLE_ROOT" = "{tmp_path}" ]\n')
        script.chmod(0o755)
        wait = WaitForCommand(argv=["/usr/local/bin/ready"], timeout=5)
        assert run_wait(wait, root=root, clock=FakeClock()) == 0

    def test_missing_executable_named(self, root: NodeRoot) -> None:
        """An executable that does not exist is reported as such."""
        wait = WaitForCommand(argv=["/nonexistent/tool"], timeout=0.1)
        with pytest.raises(WaitTimeout, match=r"`/nonexistent/tool` \(cannot run: no such file"):
            run_wait(wait, root=root, clock=FakeClock())

    def test_a_script_whose_interpreter_is_missing_is_named_as_such(
        self, root: NodeRoot, tmp_path: Path
    ) -> None:
        """A script that is there but whose #! interpreter is not: the interpreter is named
        (before: "cannot run: no such file or directory", of a file that exists)."""
        script = tmp_path / "usr/local/bin/ready"
        script.parent.mkdir(parents=True)
        script.write_text("#!/nonexistent/python3\nprint('ready')\n")
        script.chmod(0o755)
        wait = WaitForCommand(argv=["/usr/local/bin/ready"], timeout=0.1)
        with pytest.raises(WaitTimeout) as raised:
            run_wait(wait, root=root, clock=FakeClock())
        assert (
            "`/usr/local/bin/ready` (cannot run: its interpreter /nonexistent/python3 (its #! "
            "line) does not exist" in str(raised.value)
        )


class TestConcurrencyAndResources:
    @pytest.mark.usefixtures("events_only")
    def test_concurrent_waits(
        self, root: NodeRoot, pool: ThreadPoolExecutor, later: Callable[..., None]
    ) -> None:
        """Twenty waits in threads, each for its own file, all end."""
        futures = [wait_in_thread(pool, paths_wait(f"/run/w/{i}"), root) for i in range(20)]

        def create_all() -> None:
            for i in range(20):
                touch(root, f"/run/w/{i}")

        later(create_all)
        assert all(f.result(timeout=GENEROUS) < GENEROUS for f in futures)

    def test_no_fd_leak_on_success(
        self, root: NodeRoot, pool: ThreadPoolExecutor, later: Callable[..., None]
    ) -> None:
        """A wait that ends well leaves no descriptor open."""
        before = inotify_fds()
        future = wait_in_thread(pool, paths_wait("/a/b"), root)
        later(lambda: touch(root, "/a/b"))
        future.result(timeout=GENEROUS)
        assert inotify_fds() == before

    def test_no_fd_leak_on_timeout(self, root: NodeRoot) -> None:
        """A wait that times out closes its inotify descriptor."""
        before = inotify_fds()
        for _ in range(5):
            with pytest.raises(WaitTimeout):
                run_wait(paths_wait("/a/b", timeout=3), root=root, clock=FakeClock())
        assert inotify_fds() == before

    def test_no_fd_leak_on_error(self, root: NodeRoot) -> None:
        """A wait interrupted by an exception (here from progress) closes its descriptor."""
        before = inotify_fds()

        def explode(text: str) -> None:
            raise RuntimeError("interrupted")

        with pytest.raises(RuntimeError):
            run_wait(paths_wait("/a/b"), root=root, clock=FakeClock(), progress=explode)
        assert inotify_fds() == before


class TestWaitCli:
    def test_satisfied_exits_zero(self, root: NodeRoot, http_base: str) -> None:
        """All conditions met: exit 0."""
        touch(root, KUBECONFIG)
        result = CliRunner().invoke(
            wait_command,
            ["--path", KUBECONFIG, "--http", f"{http_base}/ok", "--timeout", "5"],
            obj=App(root=root, clock=FakeClock()),
        )
        assert result.exit_code == 0, result.output

    def test_timeout_names_missing_and_total_time(self, root: NodeRoot) -> None:
        """A timeout fails with WaitTimeout naming what is missing and the total time."""
        result = CliRunner().invoke(
            wait_command,
            ["--path", CA_KEY, "--timeout", "120"],
            obj=App(root=root, clock=FakeClock()),
        )
        assert isinstance(result.exception, WaitTimeout)
        assert str(result.exception) == f"still not ready after 120s: {CA_KEY}"
        assert f"noderole wait: waiting for {CA_KEY} (up to 120s)" in result.stderr

    def test_timeout_shared_across_conditions(self, root: NodeRoot, closed_port: int) -> None:
        """The second condition gets only the time left by the first."""
        clock = FakeClock()
        start = clock.monotonic()
        result = CliRunner().invoke(
            wait_command,
            ["--path", "/a", "--any", "--tcp", f"127.0.0.1:{closed_port}", "--timeout", "2"],
            obj=App(root=root, clock=clock),
        )
        assert isinstance(result.exception, WaitTimeout)
        assert str(result.exception) == "still not ready after 2s: /a"
        assert clock.monotonic() - start == pytest.approx(2)

    def test_command_found_on_path(self, root: NodeRoot) -> None:
        """--command takes shell words; a bare name is looked up on PATH."""
        result = CliRunner().invoke(
            wait_command, ["--command", "true", "--timeout", "5", "-q"], obj=App(root=root)
        )
        assert result.exit_code == 0, result.output

    @pytest.mark.parametrize(
        ("args", "expected"),
        [
            ([], "name at least one condition"),
            (["--tcp", "localhost"], "--tcp takes HOST:PORT"),
            (["--tcp", "127.0.0.1:70000"], "--tcp takes HOST:PORT"),
            (["--tcp", "[::1:6443"], "--tcp takes HOST:PORT"),
            (["--tcp", "::1:6443"], "--tcp takes HOST:PORT"),
            (["--tcp", "::1]:6443"], "--tcp takes HOST:PORT"),
            (["--path", "etc/x"], "--path takes an absolute node path"),
            (["--http", "ftp://x/"], "http:// or https:// URL"),
            (["--http", "http://[::1/healthz"], "no closing ]"),
            (["--http", "http://127.0.0.1:99999/"], "with a port 1-65535, got"),
            (["--http", "http://127.0.0.1:0/"], "(port 0)"),
            (["--http", "http://localhost:abc/"], "port 'abc', not a number"),
            (["--http", "http://::1:80/"], "an IPv6 address needs brackets"),
            (["--http", "http://user@:80/"], "no host"),
            (["--command", "no-such-tool-anywhere"], "is not on PATH"),
            (["--command", "'unbalanced"], "--command"),
        ],
    )
    def test_bad_input_is_a_usage_error(
        self, root: NodeRoot, args: list[str], expected: str
    ) -> None:
        """Wrong or missing conditions fail with a UsageError naming the option."""
        result = CliRunner().invoke(wait_command, [*args, "--timeout", "1"], obj=App(root=root))
        assert isinstance(result.exception, UsageError)
        assert expected in str(result.exception)
