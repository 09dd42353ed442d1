"""``/etc/logrotate.d/noderole``: the role's service logs rotated, on every backend.

Before, nothing rotated ``/var/log/k3s.log`` or ``/var/log/konnectivity-server.log``: no backend
wrote a logrotate configuration, and the native supervisor rotates no service log by size, so a
chatty k3s filled ``/var/log``. The file apply and render write names node paths (as units do);
the tests that run Debian's real logrotate generate the same text, by the same function, for
the scratch root's paths (logrotate runs on this machine, not inside the root), and check the
node file itself with ``logrotate -d``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

import noderole
from noderole.cli import cli
from noderole.cli._app import App
from noderole.clock import FakeClock
from noderole.manifest import entries
from noderole.operations import LOGROTATE_FILE, logrotate_text
from noderole.paths import RUN_DIR
from noderole.root import NodeRoot
from noderole.testing import RecordingBackend, ScratchRoot, eventually
from tests.harness.logrotate import Logrotate, logrotate
from tests.test_engine import Node, sleeper
from tests.test_engine import node as node  # the fixture: ends the root's processes

COUNTER = """#!/bin/sh
trap 'exit 0' TERM
i=0
while :; do i=$((i + 1)); echo "line $i"; sleep 0.01; done
"""
"""A service that writes numbered lines until stopped: a gap or a repeat is a lost line."""


@pytest.fixture(scope="module")
def real_logrotate() -> Logrotate:
    try:
        return logrotate()
    except RuntimeError as error:
        pytest.skip(str(error))


def _file(root: Path) -> Path:
    return root / LOGROTATE_FILE.lstrip("/")


def _config(root: Path, text: str) -> None:
    config = root / "etc/noderole/config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("[noderole]\nnet_check = false\n" + text)


class TestApplyNative:
    def test_apply_writes_one_block_for_the_roles_logs(self, node: Node) -> None:
        """The defect: no backend wrote a logrotate configuration. Now apply writes one block
        for the logs of the role's services, named as the node sees them, for the native
        supervisor: SIGHUP through its pid file, nothing copied."""
        node.services[:] = [
            sleeper("a"),
            noderole.Service(
                name="b",
                roles=["demo"],
                command=["/usr/local/bin/sleeper"],
                output_log="/var/log/b.out",
                error_log="/var/log/b.err",
            ),
            noderole.Service(name="milestone", roles=["demo"]),
        ]
        assert node.run("apply", "demo").exit_code == 0
        text = _file(node.root).read_text()
        assert text == logrotate_text(
            ["/var/log/a.log", "/var/log/b.out", "/var/log/b.err"], supervisor_run_dir=RUN_DIR
        )
        assert str(node.root) not in text  # node paths, not the scratch root's
        lines = [line.strip() for line in text.splitlines()]
        assert lines[3] == "/var/log/a.log /var/log/b.out /var/log/b.err {"
        for directive in ("missingok", "notifempty", "delaycompress", "sharedscripts"):
            assert directive in lines
        assert "copytruncate" not in lines
        assert "pid=$(cat /run/noderole/supervisor.pid 2>/dev/null) || exit 0" in lines
        assert not any(line.startswith(("rotate", "maxsize", "daily", "weekly")) for line in lines)
        assert (_file(node.root).stat().st_mode & 0o777) == 0o644
        recorded = entries(NodeRoot(node.root))[LOGROTATE_FILE]
        assert recorded.kind == "rendered"

    def test_an_unchanged_reapply_leaves_the_file_alone(self, node: Node) -> None:
        """Compared first: neither rewritten (same inode, same mtime) nor recorded again."""
        node.services[:] = [sleeper("a")]
        assert node.run("apply", "demo").exit_code == 0
        before = _file(node.root).stat()
        manifest = (node.root / "var/lib/noderole/written.jsonl").read_bytes()
        assert node.run("apply", "demo").exit_code == 0
        after = _file(node.root).stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
        assert (node.root / "var/lib/noderole/written.jsonl").read_bytes() == manifest

    def test_a_service_that_left_the_plan_leaves_the_file(self, node: Node) -> None:
        """The role's logs change: the file is rewritten; no log left: it goes."""
        node.services[:] = [sleeper("a"), sleeper("b")]
        assert node.run("apply", "demo").exit_code == 0
        assert "/var/log/b.log" in _file(node.root).read_text()
        node.services[:] = [sleeper("a")]
        assert node.run("apply", "demo").exit_code == 0
        text = _file(node.root).read_text()
        assert "/var/log/a.log {" in text
        assert "/var/log/b.log" not in text
        node.services[:] = [
            noderole.Service(name="a", roles=["demo"], command=["/usr/local/bin/sleeper"])
        ]
        assert node.run("apply", "demo").exit_code == 0
        assert not _file(node.root).exists()
        assert LOGROTATE_FILE not in entries(NodeRoot(node.root))

    def test_settings_bound_the_logs_or_turn_the_file_off(self, node: Node) -> None:
        """``logrotate_keep`` and ``logrotate_max_megabytes`` become ``rotate`` and ``maxsize``;
        ``logrotate = false`` (an image with its own configuration) removes noderole's file."""
        node.services[:] = [sleeper("a")]
        _config(node.root, "logrotate_keep = 3\nlogrotate_max_megabytes = 100\n")
        assert node.run("apply", "demo").exit_code == 0
        lines = [line.strip() for line in _file(node.root).read_text().splitlines()]
        assert "rotate 3" in lines
        assert "maxsize 100M" in lines
        _config(node.root, "logrotate = false\n")
        done = node.run("apply", "demo")
        assert done.exit_code == 0
        assert not _file(node.root).exists()

    def test_a_log_another_file_rotates_too_is_named(self, node: Node) -> None:
        """A node k3s's install script set up for OpenRC keeps its /etc/logrotate.d/k3s, which
        names the same log: logrotate refuses a log named twice and fails every run. The apply
        that writes noderole's file says so, naming the other file and the fix."""
        node.services[:] = [sleeper("a")]
        other = node.root / "etc/logrotate.d/k3s"
        other.parent.mkdir(parents=True)
        other.write_text("/var/log/a.log {\n  missingok\n  copytruncate\n}\n")
        done = node.run("apply", "demo")
        assert done.exit_code == 0, done.output
        assert "/etc/logrotate.d/k3s names /var/log/a.log too" in done.stderr
        assert "remove /etc/logrotate.d/k3s" in done.stderr

    def test_render_on_a_native_node_leaves_the_file_its_apply_needs(self, node: Node) -> None:
        """`render --backend openrc` for an image, on a node the native supervisor runs: it
        replaced the apply's file (SIGHUP to the supervisor) with copytruncate, losing lines
        at each rotation until the next apply. The running backend's file stays."""
        node.services[:] = [sleeper("a")]
        assert node.run("apply", "demo").exit_code == 0
        before = _file(node.root).read_text()
        done = node.run("render", "demo", "--backend", "openrc")
        assert done.exit_code == 0, done.output
        assert _file(node.root).read_text() == before
        assert "postrotate" in before

    def test_a_file_noderole_did_not_write_is_kept(self, node: Node) -> None:
        """An administrator's own /etc/logrotate.d/noderole is never replaced: a warning."""
        node.services[:] = [sleeper("a")]
        _file(node.root).parent.mkdir(parents=True)
        _file(node.root).write_text("/var/log/other.log {\n}\n")
        done = node.run("apply", "demo")
        assert done.exit_code == 0
        assert _file(node.root).read_text() == "/var/log/other.log {\n}\n"
        assert f"refusing to replace {LOGROTATE_FILE}: noderole did not write it" in done.stderr
        assert "the services' logs are not rotated" in done.stderr


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ("/var/log/a*.log", "'*'"),
        ('/var/log/a"b.log', "'\"'"),
        ("/var/log/a\nb.log", "'\\n'"),
        ("/var/log/{a}.log", "'{', '}'"),
    ],
)
def test_a_path_logrotate_cannot_take_is_left_out_and_named(
    node_root: ScratchRoot, fake_clock: FakeClock, path: str, shown: str
) -> None:
    """A glob, quote, brace or control character: that log is left out, and the warning names
    the service, the path, the characters and the fix; the other logs are written."""
    services = [
        noderole.Service(name="odd", roles=["r"], command=["/bin/odd"], output_log=path),
        noderole.Service(
            name="spaced", roles=["r"], command=["/bin/sp"], output_log="/var/log/with space.log"
        ),
    ]
    app = _app(node_root, fake_clock, services)
    assert app.apply(app.plan("r"), RecordingBackend(node_root)).ok
    text = node_root.read(LOGROTATE_FILE)
    assert '"/var/log/with space.log" {' in text
    assert path not in text
    (warning,) = [w for w in app.warnings if "leaves out" in w]
    assert warning == (
        f"{LOGROTATE_FILE} leaves out {path!r}, service odd's output_log: logrotate cannot take "
        f"{shown} in a file name (a quote, a backslash, a glob or brace character, a control "
        "character); give the service a log path without them, or rotate that log with a "
        "logrotate file of your own"
    )


def _app(node_root: ScratchRoot, clock: FakeClock, services: list[noderole.Service]) -> App:
    module = types.ModuleType("logplugin")
    module.noderole_services = noderole.hookimpl(lambda: services)  # type: ignore[attr-defined]
    return App(
        root=NodeRoot(node_root.path),
        clock=clock,
        plugin_objects=(("logplugin", module),),
        autoload=False,
    )


class TestInitSystems:
    def _services(self) -> list[noderole.Service]:
        return [
            noderole.Service(
                name="k3s",
                roles=["r"],
                command=["/usr/local/bin/k3s", "server"],
                output_log="/var/log/k3s.log",
                error_log="/var/log/k3s.log",
            )
        ]

    @pytest.mark.parametrize("backend", ["openrc", "systemd"])
    def test_render_writes_copytruncate(
        self, node_root: ScratchRoot, fake_clock: FakeClock, backend: str
    ) -> None:
        """The program holds its log under OpenRC and systemd: ``copytruncate``, as k3s's own
        install script does; written by render with the other boot files, and removed by the
        next render once ``logrotate = false``."""
        app = _app(node_root, fake_clock, self._services())
        result = app.render("r", backend)
        assert LOGROTATE_FILE in result.changed
        text = node_root.read(LOGROTATE_FILE)
        assert text == logrotate_text(["/var/log/k3s.log"], supervisor_run_dir=None)
        lines = [line.strip() for line in text.splitlines()]
        assert "copytruncate" in lines
        assert "postrotate" not in lines
        assert LOGROTATE_FILE not in app.render("r", backend).changed  # unchanged: not written
        node_root.write("/etc/noderole/config.toml", "[noderole]\nlogrotate = false\n")
        again = _app(node_root, fake_clock, self._services())
        assert LOGROTATE_FILE in again.render("r", backend).removed
        assert not node_root.exists(LOGROTATE_FILE)

    @pytest.mark.parametrize("backend", ["openrc", "systemd"])
    def test_render_keeps_a_file_it_did_not_write_and_writes_the_units(
        self, node_root: ScratchRoot, fake_clock: FakeClock, backend: str
    ) -> None:
        """An administrator's own /etc/logrotate.d/noderole (or one a node applied by an older
        noderole holds): render refused it and wrote nothing, no unit, no runscript. It is a
        warning naming the way out, and the boot files are written; a file render removed
        (``logrotate = false``) and the administrator wrote again is his, too."""
        foreign = "/var/log/noderole/*.log {\n weekly\n}\n"
        node_root.write(LOGROTATE_FILE, foreign)
        app = _app(node_root, fake_clock, self._services())
        result = app.render("r", backend)
        unit = "/etc/init.d/k3s" if backend == "openrc" else "/etc/systemd/system/k3s.service"
        assert unit in result.changed
        assert node_root.read(LOGROTATE_FILE) == foreign
        assert any("logrotate = false" in warning for warning in app.warnings)
        node_root.resolve(LOGROTATE_FILE).unlink()
        assert (
            LOGROTATE_FILE
            in _app(node_root, fake_clock, self._services()).render("r", backend).changed
        )
        node_root.write("/etc/noderole/config.toml", "[noderole]\nlogrotate = false\n")
        assert (
            LOGROTATE_FILE
            in _app(node_root, fake_clock, self._services()).render("r", backend).removed
        )
        node_root.write(LOGROTATE_FILE, foreign)  # the administrator's own, now
        node_root.write("/etc/noderole/config.toml", "[noderole]\n")
        _app(node_root, fake_clock, self._services()).render("r", backend)
        assert node_root.read(LOGROTATE_FILE) == foreign

    def test_an_init_system_apply_writes_copytruncate(
        self, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        """Any backend but the native one starts the program on its own file."""
        app = _app(node_root, fake_clock, self._services())
        assert app.apply(app.plan("r"), RecordingBackend(node_root)).ok
        assert node_root.read(LOGROTATE_FILE) == logrotate_text(
            ["/var/log/k3s.log"], supervisor_run_dir=None
        )

    def test_reset_removes_it_and_purge_too(
        self, node_root: ScratchRoot, fake_clock: FakeClock
    ) -> None:
        """Removed with the units by a plain reset (kept logs would otherwise be aged out by
        it), and by ``--purge``; an edited one stays, named."""
        app = _app(node_root, fake_clock, self._services())
        backend = RecordingBackend(node_root)
        assert app.apply(app.plan("r"), backend).ok
        report = app.reset(None, backend)
        assert LOGROTATE_FILE in report.removed
        assert not node_root.exists(LOGROTATE_FILE)
        assert app.apply(app.plan("r"), backend).ok
        assert LOGROTATE_FILE in app.reset(None, backend, purge=True).removed
        assert app.apply(app.plan("r"), backend).ok
        node_root.write(LOGROTATE_FILE, node_root.read(LOGROTATE_FILE) + "# mine\n")
        kept = {k.path: k.reason for k in app.reset(None, backend, purge=True).kept}
        assert "changed since noderole wrote it" in kept[LOGROTATE_FILE]


def test_settings_are_validated(node_root: ScratchRoot) -> None:
    """A negative count or a size that is no whole number is refused by ``config check``."""
    node_root.write(
        "/etc/noderole/config.toml",
        '[noderole]\nlogrotate_keep = -1\nlogrotate_max_megabytes = "100M"\n',
    )
    app = App(root=NodeRoot(node_root.path), autoload=False)
    done = CliRunner().invoke(cli, ["config", "check"], obj=app)
    assert done.exit_code != 0
    assert "logrotate_keep" in done.output
    assert "logrotate_max_megabytes" in done.output


class TestRealLogrotate:
    """Debian's logrotate on what noderole generates."""

    def test_the_node_file_parses(
        self, node: Node, real_logrotate: Logrotate, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        """The file apply wrote, node paths and all, as logrotate reads it (``-d``: nothing is
        touched, the missing node paths are ``missingok``)."""
        node.services[:] = [sleeper("a"), sleeper("b")]
        _config(node.root, "logrotate_keep = 2\nlogrotate_max_megabytes = 5\n")
        assert node.run("apply", "demo").exit_code == 0
        state = tmp_path_factory.mktemp("lr") / "state"
        done = real_logrotate.run(_file(node.root), state, "-d")
        said = done.stdout + done.stderr
        assert "error" not in said.lower(), said
        assert "rotating pattern: /var/log/a.log /var/log/b.log " in said

    def test_native_rotation_under_a_running_service_loses_no_line(
        self, node: Node, real_logrotate: Logrotate, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        """A service writes numbered lines through the real native supervisor; logrotate
        renames its log, its ``postrotate`` finds the supervisor through the pid file and sends
        SIGHUP, the supervisor reopens, the service writes on into the new file; every line is
        in LOG.1 or LOG, in order, none twice."""
        counter = node.root / "usr/local/bin/counter"
        counter.write_text(COUNTER)
        counter.chmod(0o755)
        node.services[:] = [
            noderole.Service(
                name="counter",
                roles=["demo"],
                command=["/usr/local/bin/counter"],
                output_log="/var/log/counter.log",
                error_log="/var/log/counter.log",
            )
        ]
        assert node.run("apply", "demo").exit_code == 0
        root = NodeRoot(node.root)
        log = Path(root.local("/var/log/counter.log"))
        eventually(lambda: log.stat().st_size > 0, "the first lines")
        # The same text apply writes, for the paths logrotate on this machine reaches.
        scratch = tmp_path_factory.mktemp("lr")
        config = scratch / "noderole"
        config.write_text(
            logrotate_text([str(log)], supervisor_run_dir=root.local(RUN_DIR), keep=1)
        )
        real_logrotate.run(config, scratch / "state", "-f")
        rotated = log.with_name("counter.log.1")
        assert rotated.stat().st_size > 0
        eventually(lambda: log.exists() and log.stat().st_size > 0, "lines in the new file")
        assert node.run("stop").exit_code == 0
        old = rotated.read_text().splitlines()
        new = log.read_text().splitlines()
        assert old
        assert new
        # The stop's SIGTERM may end its `sleep` first: sh then says "Terminated".
        numbers = [int(line[5:]) for line in old + new if line.startswith("line ")]
        assert numbers == list(range(1, len(numbers) + 1))
        supervisor_log = (node.root / "var/log/noderole/supervisor.log").read_text()
        assert "SIGHUP: log files reopened" in supervisor_log

    def test_postrotate_is_harmless_without_the_supervisor(
        self, real_logrotate: Logrotate, tmp_path: Path
    ) -> None:
        """No pid file: nothing is signalled, logrotate succeeds. A pid file left by a killed
        daemon that names another process by now: that process is not signalled (a SIGHUP
        would end this ``sleep``)."""
        run_dir = tmp_path / "run/noderole"
        run_dir.mkdir(parents=True)
        log = tmp_path / "var/log/k3s.log"
        log.parent.mkdir(parents=True)
        config = tmp_path / "noderole"
        config.write_text(logrotate_text([str(log)], supervisor_run_dir=str(run_dir), keep=1))
        log.write_text("one\n")
        real_logrotate.run(config, tmp_path / "state", "-f")
        assert (tmp_path / "var/log/k3s.log.1").read_text() == "one\n"
        with _process(["sleep", "1000"]) as other:
            (run_dir / "supervisor.pid").write_text(f"{other.pid}\n")
            log.write_text("two\n")
            real_logrotate.run(config, tmp_path / "state", "-f")
            assert (tmp_path / "var/log/k3s.log.1").read_text() == "two\n"
            assert other.poll() is None, "a process that is no supervisor was signalled"

    def test_copytruncate_under_a_program_holding_its_log(
        self, real_logrotate: Logrotate, tmp_path: Path
    ) -> None:
        """OpenRC/systemd: the program appends to its own descriptor (supervise-daemon and
        ``noderole exec`` open the log with O_APPEND). After logrotate's copy and truncate,
        LOG.1 holds what was written and the program's next lines start the emptied file (no
        hole before them). A path with a space is written quoted, and taken."""
        log = tmp_path / "var/log/with space.log"
        log.parent.mkdir(parents=True)
        config = tmp_path / "noderole"
        config.write_text(logrotate_text([str(log)], supervisor_run_dir=None, keep=1))
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"before\n")
            real_logrotate.run(config, tmp_path / "state", "-f")
            os.write(fd, b"after\n")
        finally:
            os.close(fd)
        assert (tmp_path / "var/log/with space.log.1").read_text() == "before\n"
        assert log.read_bytes() == b"after\n"


@contextmanager
def _process(argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A process that is ended (by pid) and reaped however the test ends."""
    process = subprocess.Popen(argv)
    try:
        yield process
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
