"""The native supervisor with hundreds of services: every one starts, every one stops.

Real processes (a copy of ``sleep`` under a scratch root). Nothing here times anything: the
figures for 1,000 services belong to ``python -m bench`` (``bench/bench_scale.py``).
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from noderole.backends.native import NativeBackend
from noderole.clock import SystemClock
from noderole.console import QuietProgress
from noderole.engine import apply_plan
from noderole.plan import build_plan
from noderole.records import Service, Supervision
from noderole.root import NodeRoot
from noderole.supervisor import NotAnswering, Supervisor
from noderole.testing import end_node_processes, node_processes

COUNT = 500


def _services(count: int) -> list[Service]:
    return [
        Service(
            name=f"s{i}",
            roles=["many"],
            command=["/bin/sleep", "1000"],
            supervision=Supervision(respawn_delay=1, stop_timeout=5),
        )
        for i in range(count)
    ]


@pytest.fixture
def root(tmp_path: Path) -> object:
    program = tmp_path / "bin/sleep"
    program.parent.mkdir(parents=True)
    shutil.copy2("/bin/sleep", program)
    yield tmp_path
    assert end_node_processes(tmp_path) == []


@pytest.mark.slow
@pytest.mark.timeout(120)
class TestHundreds:
    def test_apply_starts_every_service_and_stop_ends_them(self, root: Path) -> None:
        """apply of 500 services (a thread each) starts all 500; one stop ends every process."""
        plan = build_plan(_services(COUNT), "many")
        backend = NativeBackend(NodeRoot(root))
        report = apply_plan(
            plan,
            root=NodeRoot(root),
            clock=SystemClock(),
            backend=backend,
            progress=QuietProgress(),
        )
        failed = [f"{r.name}: {r.reason}" for r in report.services if not r.ok]
        assert failed == []
        statuses = backend.status()
        assert sorted({s.state for s in statuses.values()}) == ["running"]
        assert len(statuses) == COUNT
        stopped = NativeBackend(NodeRoot(root)).stop([f"s{i}" for i in range(COUNT)])
        assert [s.state for s in stopped] == ["stopped"] * COUNT
        children = [s.pid for s in statuses.values()]
        assert set(children).isdisjoint(node_processes(root))


class TestFullBacklog:
    def test_full_listen_queue_is_retried_then_reported(self, tmp_path: Path) -> None:
        """connect() failing with EAGAIN is retried until the hello timeout, then reported."""
        run_dir = tmp_path / "run/noderole"
        run_dir.mkdir(parents=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        queued: list[socket.socket] = []
        try:
            listener.bind(str(run_dir / "supervisor.sock"))
            listener.listen(0)  # a daemon that accepts nothing: its queue fills at once
            while True:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
                queued.append(sock)
                try:
                    sock.connect(str(run_dir / "supervisor.sock"))
                except BlockingIOError:
                    break
            warnings: list[str] = []
            client = Supervisor(run_dir, timeout=300, warn=warnings.append)
            [status] = client.status(["a"])
            assert "not answering" in status.reason
            with pytest.raises(NotAnswering, match="not answering"):
                client.daemon_pid()
        finally:
            for sock in queued:
                sock.close()
            listener.close()
