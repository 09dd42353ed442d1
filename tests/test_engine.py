"""`noderole apply`, `status`, `stop`, `restart` with the native supervisor: real processes."""

from __future__ import annotations

import json
import linecache
import os
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

import noderole
from noderole.cli import cli
from noderole.cli._app import App
from noderole.clock import SystemClock
from noderole.errors import LockedError
from noderole.root import NodeRoot
from noderole.state import node_lock
from noderole.supervisor._proc import is_alive
from noderole.testing import (
    RecordingBackend,
    end_node_processes,
    eventually,
    node_processes,
    process_cmdline,
    process_parent,
    supervisor_processes,
)

SLEEPER = """#!/bin/sh
echo "$0 up $$ $*"
trap 'exit 0' TERM
while :; do sleep 1; done
"""

READY_WRITER = """#!/bin/sh
echo ready > "$NODEROLE_ROOT/run/ready-flag"
trap 'exit 0' TERM
while :; do sleep 1; done
"""


_cmdline = process_cmdline


_parent = process_parent


class Node:
    """A scratch node root with stand-in executables and a plugin defined by the test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.services: list[noderole.Service] = []
        self.broken_plugin = False
        """With True, a second plugin, ``broken``, whose services hook raises, is loaded."""
        for name, text in {"sleeper": SLEEPER, "ready-writer": READY_WRITER}.items():
            path = root / "usr/local/bin" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            path.chmod(0o755)

    def plugin(self) -> types.ModuleType:
        module = types.ModuleType("testplugin")
        services = self.services

        def noderole_services(node: Any) -> list[noderole.Service]:
            return list(services)

        module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
        return module

    def app(self) -> App:
        plugins: list[tuple[str, object]] = [("test", self.plugin())]
        if self.broken_plugin:
            broken = types.ModuleType("brokenplugin")

            def noderole_services(node: Any) -> list[noderole.Service]:
                raise RuntimeError("this plugin is broken")

            broken.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
            plugins.append(("broken", broken))
        return App(root=NodeRoot(self.root), plugin_objects=tuple(plugins), autoload=False)

    def run(self, *args: str) -> Result:
        return CliRunner().invoke(cli, list(args), obj=self.app(), catch_exceptions=False)

    def processes(self) -> list[int]:
        """Every live process started for this root: children (NODEROLE_ROOT) and the daemon."""
        return node_processes(self.root)

    def pid(self, name: str) -> int:
        return int((self.root / f"run/{name}.pid").read_text())


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Poll until true (noderole.testing.eventually); never an assertion on duration."""
    return eventually(condition, what, timeout=timeout)


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    """A Node; teardown stops everything and SIGKILLs (and reports) any survivor."""
    (tmp_path / "etc/noderole").mkdir(parents=True)
    # The net check looks at the real machine; a CI container may have no address.
    (tmp_path / "etc/noderole/config.toml").write_text("[noderole]\nnet_check = false\n")
    n = Node(tmp_path)
    yield n
    survivors = end_node_processes(tmp_path)
    assert survivors == [], f"processes survived shutdown: {survivors}"


def sleeper(name: str, **kwargs: Any) -> noderole.Service:
    kwargs.setdefault("supervision", noderole.Supervision(respawn_delay=0.05, stop_timeout=2))
    return noderole.Service(
        name=name,
        roles=kwargs.pop("roles", ["demo"]),
        command=["/usr/local/bin/sleeper", *kwargs.pop("args", [])],
        pidfile=f"/run/{name}.pid",
        output_log=f"/var/log/{name}.log",
        error_log=f"/var/log/{name}.log",
        **kwargs,
    )


def _config_writer(text: str) -> noderole.Service:
    """Service ``a``, whose pre-start writes ``text`` to /etc/a/config.yaml."""
    step = noderole.WriteFile(path="/etc/a/config.yaml", content=text, mode=0o600)
    return sleeper("a", pre_start=[step])


def _started_by_an_older_noderole(node: Node, *, files_counted: bool = False) -> None:
    """Start the node's first service again as a noderole whose fingerprints had no files
    (or, ``files_counted``, only those of the service's own steps)."""
    from noderole.engine import (
        definition_digests,
        fingerprint_base,
        process_fingerprint,
        written_files,
    )

    first = node.services[0]
    older = process_fingerprint(definition_digests(first), [], written_files(first))
    if not files_counted:
        older = fingerprint_base(older)
    node.app().backend("native").start(node.services[0], fingerprint=older)


def report(result: Result) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(result.stdout)
    return {s["name"]: s for s in data["services"]} | {"_": data}


class TestApply:
    def test_starts_in_order_and_is_idempotent(self, node: Node) -> None:
        """apply starts every service; a second apply starts nothing and reports running."""
        node.services += [sleeper("a", need=["net"]), sleeper("b", after=["a"])]
        first = report(node.run("apply", "demo", "--json"))
        assert (first["a"]["status"], first["b"]["status"]) == ("started", "started")
        assert first["net"]["status"] == "done"
        pids = (node.pid("a"), node.pid("b"))
        second = report(node.run("apply", "demo", "--json"))
        assert (second["a"]["status"], second["b"]["status"]) == ("running", "running")
        assert (node.pid("a"), node.pid("b")) == pids
        assert (node.root / "var/lib/noderole/role").read_text() == "demo\n"

    def test_failed_prestart_skips_dependents_only(self, node: Node) -> None:
        """A failing step fails its service; what needs it is skipped; the rest starts; exit 1."""
        node.services += [
            sleeper("broken", pre_start=[noderole.Fail(message="EKS_X empty")]),
            sleeper("dependent", need=["broken"]),
            sleeper("independent"),
        ]
        result = node.run("apply", "demo", "--json")
        assert result.exit_code == 1
        data = report(result)
        assert data["broken"]["status"] == "failed"
        assert data["broken"]["reason"] == "EKS_X empty"
        assert data["dependent"]["status"] == "skipped"
        assert data["dependent"]["reason"] == (
            "not started: it needs broken, which failed: EKS_X empty"
        )
        assert data["independent"]["status"] == "started"

    def test_console_lists_failures(self, node: Node) -> None:
        """Plain output has OpenRC-style lines and lists failed services on stderr."""
        node.services += [sleeper("ok"), sleeper("bad", pre_start=[noderole.Fail(message="nope")])]
        result = node.run("apply", "demo")
        assert result.exit_code == 1
        assert " * Started ok" in result.stdout
        assert " * ERROR: failed to start bad: nope" in result.stdout
        assert "  bad: nope" in result.stderr

    def test_changed_definition_restarts_with_reason(self, node: Node) -> None:
        """A changed argument restarts the service, and the report says what changed."""
        node.services.append(sleeper("a", args=["--v1"]))
        node.run("apply", "demo")
        old = node.pid("a")
        node.services[0] = sleeper("a", args=["--v2"])
        data = report(node.run("apply", "demo", "--json"))
        assert data["a"]["status"] == "restarted"
        assert data["a"]["reason"] == "restarted: command line: removed --v1, added --v2"
        assert wait_until(lambda: node.pid("a") != old, "a new pid")

    def test_a_stop_under_way_is_no_process_to_keep(self, node: Node) -> None:
        """A `stop` interrupted (Ctrl-C, its client killed) goes on in the supervisor, the
        service's state still `ready` while it stops. The next apply said `already running`
        and exited 0, and the supervisor killed it seconds later: nothing ran. The apply now
        starts it, queued behind the stop; `--dry-run` says so."""
        stubborn = node.root / "usr/local/bin/stubborn"
        stubborn.write_text("#!/bin/sh\ntrap '' TERM\nwhile :; do sleep 1; done\n")
        stubborn.chmod(0o755)
        slow = noderole.Supervision(respawn_delay=0.05, stop_timeout=3)
        node.services.append(
            noderole.Service(
                name="a",
                roles=["demo"],
                command=["/usr/local/bin/stubborn"],
                pidfile="/run/a.pid",
                supervision=slow,
            )
        )
        assert node.run("apply", "demo").exit_code == 0
        old = node.pid("a")
        native = node.app().backend("native")
        stopper = threading.Thread(target=native.stop, args=(["a"],), daemon=True)
        stopper.start()
        try:
            wait_until(lambda: native.status(["a"])["a"].reason == "stopping", "a stop under way")
            dry = json.loads(node.run("apply", "demo", "--dry-run", "--json").stdout)
            assert [(r["action"], r["why"]) for r in dry["services"]] == [("start", "not running")]
            data = report(node.run("apply", "demo", "--json"))
            assert data["a"]["status"] == "started", data["a"]
        finally:
            stopper.join(timeout=30)
        assert wait_until(lambda: native.status(["a"])["a"].state == "running", "a running")
        assert node.pid("a") != old

    def test_what_needs_a_restarted_service_is_restarted_after_it(self, node: Node) -> None:
        """a's definition changed: apply restarted a and kept d, which needs it, running on
        what the old a gave it, where OpenRC and systemd (Requires=) restart d too. d is
        restarted after a, saying why; u, which only uses a, is kept."""
        node.services += [
            sleeper("a", args=["--v1"]),
            sleeper("d", need=["a"]),
            sleeper("u", use=["a"]),
        ]
        assert node.run("apply", "demo").exit_code == 0
        d, u = node.pid("d"), node.pid("u")
        node.services[0] = sleeper("a", args=["--v2"])
        dry = json.loads(node.run("apply", "demo", "--dry-run", "--json").stdout)["services"]
        assert {r["name"]: (r["action"], r["why"]) for r in dry}["d"] == (
            "restart",
            "it needs a, which restarts first",
        )
        data = report(node.run("apply", "demo", "--json"))
        assert data["a"]["status"] == "restarted"
        assert (data["d"]["status"], data["d"]["reason"]) == (
            "restarted",
            "restarted: it needs a, which was restarted",
        )
        assert data["u"]["status"] == "running"
        assert wait_until(lambda: node.pid("d") != d, "a new d")
        assert node.pid("u") == u
        assert report(node.run("apply", "demo", "--json"))["d"]["status"] == "running"

    def test_a_restart_says_restarted_once(self, node: Node) -> None:
        """The reason of a restart begins "restarted: " (as --json has it): apply's line said
        `Restarted a: restarted: ...`, and status `last apply (...): restarted: restarted: ...`."""
        node.services.append(sleeper("a", args=["--v1"]))
        node.run("apply", "demo")
        node.services[0] = sleeper("a", args=["--v2"])
        applied = node.run("apply", "demo")
        assert "Restarted a: command line: removed --v1, added --v2" in applied.stdout
        shown = node.run("status", "a").stdout
        assert "): restarted: command line: removed --v1, added --v2" in shown
        assert "restarted: restarted" not in applied.stdout + shown

    def test_a_file_its_pre_start_writes_changed_restarts_it(self, node: Node) -> None:
        """k3s reads its config drop-ins once, at start: a plugin removed or reconfigured
        (konnectivity's egress selector gone from 50-noderole.yaml) rewrote the drop-in, and
        k3s ran on with the old one, "already running". A change to what a service's own
        WriteFile steps write restarts it, naming the file; the same content keeps it."""

        node.services.append(_config_writer("one: 1\n"))
        node.run("apply", "demo")
        old = node.pid("a")
        assert report(node.run("apply", "demo", "--json"))["a"]["status"] == "running"
        node.services[0] = _config_writer("one: 2\n")
        dry = json.loads(node.run("apply", "demo", "--dry-run", "--json").stdout)["services"]
        assert [(row["action"], row["why"]) for row in dry] == [
            ("restart", "file /etc/a/config.yaml changed")
        ]
        data = report(node.run("apply", "demo", "--json"))
        assert data["a"]["status"] == "restarted"
        assert data["a"]["reason"] == "restarted: file /etc/a/config.yaml changed"
        assert wait_until(lambda: node.pid("a") != old, "a new pid")

    def test_a_step_left_out_once_its_file_is_there_restarts_nothing(self, node: Node) -> None:
        """k3s's plugin copies config.yaml from its skeleton only while it is missing: the
        second apply has no such step, and the file is as the first wrote it. That is no
        change (a first version restarted k3s at every second apply); a later change of
        another file still is, and a step that comes back with other content too."""

        def service(*steps: noderole.WriteFile) -> noderole.Service:
            return sleeper("a", pre_start=list(steps))

        copy = noderole.WriteFile(path="/etc/a/config.yaml", content="x: 1\n", mode=0o600)
        dropin = noderole.WriteFile(path="/etc/a/dropin.yaml", content="y: 1\n", mode=0o600)
        node.services.append(service(copy, dropin))
        node.run("apply", "demo")
        node.services[0] = service(dropin)
        for _ in range(2):
            assert report(node.run("apply", "demo", "--json"))["a"]["status"] == "running"
        changed = noderole.WriteFile(path="/etc/a/dropin.yaml", content="y: 2\n", mode=0o600)
        node.services[0] = service(changed)
        data = report(node.run("apply", "demo", "--json"))
        assert data["a"]["reason"] == "restarted: file /etc/a/dropin.yaml changed"
        other = noderole.WriteFile(path="/etc/a/config.yaml", content="x: 2\n", mode=0o600)
        node.services[0] = service(other, changed)
        data = report(node.run("apply", "demo", "--json"))
        assert data["a"]["reason"] == "restarted: file /etc/a/config.yaml changed"

    def test_upgrading_noderole_restarts_no_service_that_writes_files(self, node: Node) -> None:
        """A process an older noderole started has no files in its fingerprint: an apply of
        this one keeps it while its steps find their files as they are (again and again), and
        restarts it once one of them rewrites a file."""
        node.services.append(_config_writer("one: 1\n"))
        node.run("apply", "demo")
        _started_by_an_older_noderole(node)
        pid = node.pid("a")
        for _ in range(2):
            assert report(node.run("apply", "demo", "--json"))["a"]["status"] == "running"
        assert node.pid("a") == pid
        node.services[0] = _config_writer("one: 2\n")
        data = report(node.run("apply", "demo", "--json"))
        assert data["a"]["reason"] == "restarted: file /etc/a/config.yaml changed"

    def test_a_file_rewritten_under_an_older_process_restarts_it(self, node: Node) -> None:
        """A process an older noderole started, whose file was rewritten after it started (an
        apply killed between the rewrite and the restart; an older noderole that rewrote a
        drop-in and kept k3s running): the steps now find the file as they would write it,
        and the process ran on the old content for good. A file modified since the process
        started counts as changed; `--dry-run` says the same, its mode included."""
        node.services.append(_config_writer("one: 1\n"))
        node.run("apply", "demo")
        _started_by_an_older_noderole(node)
        config = node.root / "etc/a/config.yaml"
        config.write_text("one: 2\n")  # the interrupted apply's rewrite, after the start
        node.services[0] = _config_writer("one: 2\n")
        dry = json.loads(node.run("apply", "demo", "--dry-run", "--json").stdout)["services"]
        assert [(row["action"], row["why"]) for row in dry] == [
            ("restart", "file /etc/a/config.yaml changed")
        ]
        data = report(node.run("apply", "demo", "--json"))
        assert data["a"]["reason"] == "restarted: file /etc/a/config.yaml changed"

    def test_a_role_change_that_rewrites_a_needed_milestones_file_restarts_it(
        self, node: Node
    ) -> None:
        """server -> server-join: k3s needs k3s-cluster, which k3s-cluster-init (server) and
        k3s-cluster-join (server-join) provide, each writing the role drop-in k3s reads at
        start. k3s ran on as its own cluster, "already running": only its own steps' files
        counted. A milestone's file the service needs counts too; the same content keeps it,
        and a milestone file first counted by this noderole keeps a process started before."""

        def milestone(name: str, role: str, text: str) -> noderole.Service:
            step = noderole.WriteFile(path="/etc/a/role.yaml", content=text, mode=0o600)
            return noderole.Service(
                name=name, roles=[role], provide=["cluster"], before=["a"], pre_start=[step]
            )

        node.services.append(sleeper("a", roles=["demo", "other"], need=["cluster"]))
        node.services.append(milestone("cluster-init", "demo", "cluster-init: true\n"))
        node.services.append(milestone("cluster-join", "other", "server: https://h:6443\n"))
        assert node.run("apply", "demo").exit_code == 0
        assert report(node.run("apply", "demo", "--json"))["a"]["status"] == "running"
        for files_counted in (False, True):  # no file, or only a's own files, as before
            _started_by_an_older_noderole(node, files_counted=files_counted)
            old = node.pid("a")
            assert report(node.run("apply", "demo", "--json"))["a"]["status"] == "running"
        dry = json.loads(node.run("apply", "other", "--dry-run", "--json").stdout)["services"]
        assert {row["name"]: row["why"] for row in dry}["a"] == "file /etc/a/role.yaml changed"
        data = report(node.run("apply", "other", "--json"))
        assert data["a"]["reason"] == "restarted: file /etc/a/role.yaml changed"
        assert wait_until(lambda: node.pid("a") != old, "a new pid")
        assert report(node.run("apply", "other", "--json"))["a"]["status"] == "running"

    def test_report_has_step_timings(self, node: Node) -> None:
        """--json reports each step's kind, description and time, and the start."""
        node.services.append(sleeper("a", pre_start=[noderole.MakeDirectories(paths=["/run/a"])]))
        data = report(node.run("apply", "demo", "--json"))
        kinds = [step["kind"] for step in data["a"]["steps"]]
        assert kinds == ["directories", "start"]
        assert all(step["seconds"] >= 0 for step in data["a"]["steps"])
        assert (node.root / "run/a").is_dir()

    def test_dependency_readiness_is_awaited(self, node: Node) -> None:
        """A dependent starts only after its dependency's readiness check passes."""
        writer = noderole.Service(
            name="writer",
            roles=["demo"],
            command=["/usr/local/bin/ready-writer"],
            readiness=noderole.WaitForPaths(paths=["/run/ready-flag"], timeout=20),
            supervision=noderole.Supervision(respawn_delay=0.05, stop_timeout=2),
        )
        reader = sleeper(
            "reader",
            need=["writer"],
            pre_start=[noderole.WaitForPaths(paths=["/run/ready-flag"], timeout=0.001)],
        )
        node.services += [writer, reader]
        (node.root / "run").mkdir(exist_ok=True)
        data = report(node.run("apply", "demo", "--json"))
        # reader's own wait has a ~0 timeout: it can only pass because apply awaited readiness
        assert data["reader"]["status"] == "started"

    def test_reapply_reads_readiness_once_when_it_was_ready(self, node: Node) -> None:
        """A re-apply that leaves a ready service running asks the backend for states once; a
        running service that was not ready yet is asked again at the end, and reported as it is
        then."""
        (node.root / "run").mkdir(exist_ok=True)
        node.services += [
            noderole.Service(
                name="writer",
                roles=["demo"],
                command=["/usr/local/bin/ready-writer"],
                readiness=noderole.WaitForPaths(paths=["/run/ready-flag"], timeout=20),
                supervision=noderole.Supervision(respawn_delay=0.05, stop_timeout=2),
            ),
            sleeper("never", readiness=noderole.WaitForPaths(paths=["/run/no-flag"], timeout=20)),
        ]
        node.run("apply", "demo")
        app = node.app()
        wait_until(
            lambda: app.backend("native").status(["writer"])["writer"].state == "ready",
            "writer ready",
        )
        asked: list[list[str]] = []
        from noderole.backends.native import NativeBackend

        native = app.backend("native")
        assert isinstance(native, NativeBackend)
        acting = native.status_to_act_on

        class Counting:
            """The real native backend; each status call's names are noted."""

            name = native.name

            def __getattr__(self, attribute: str) -> Any:
                return getattr(native, attribute)

            def status(self, names: Any = None) -> Any:
                asked.append(sorted(names))
                return native.status(names)

            def status_to_act_on(self, names: Any) -> Any:
                asked.append(sorted(names))
                return acting(names)

        from noderole.console import QuietProgress

        again = app.apply(app.plan("demo"), Counting(), progress=QuietProgress())
        reports = {r.name: r for r in again.services}
        assert (reports["writer"].status, reports["writer"].ready) == ("running", True)
        assert (reports["never"].status, reports["never"].ready) == ("running", False)
        assert asked == [["never", "writer"], ["never"]]

    def test_dry_run_changes_nothing(self, node: Node) -> None:
        """--dry-run says what would start and starts nothing."""
        node.services.append(sleeper("a"))
        result = node.run("apply", "demo", "--dry-run", "--json")
        rows = {r["name"]: r for r in json.loads(result.stdout)["services"]}
        assert rows["a"]["action"] == "start"
        assert node.processes() == []
        node.run("apply", "demo")
        node.services[0] = sleeper("a", args=["x"])
        rows = {
            r["name"]: r
            for r in json.loads(node.run("apply", "demo", "--dry-run", "--json").stdout)["services"]
        }
        assert rows["a"]["action"] == "restart"
        assert rows["a"]["why"] == "command line: added x"

    def test_dry_run_keeps_a_process_running_as_apply_would_start_it(self, node: Node) -> None:
        """A process running with the fingerprint apply would start it with, while nothing of
        its definition is recorded yet (the first apply still running, or killed before it
        recorded the definitions): the dry run says it is left running, as apply then leaves
        it ("already running"). Before, the dry run compared the definition with the record
        alone and said restart: "command or arguments, environment, pidfile or logs,
        supervision settings, user, group or working directory changed"."""
        node.services.append(sleeper("a"))
        _started_as(node, node.services[0])
        pid = wait_until(lambda: (node.root / "run/a.pid").exists() and node.pid("a"), "a up")
        assert not (node.root / "var/lib/noderole/applied.json").exists()
        rows = _dry_run(node)
        assert (rows["a"]["action"], rows["a"]["why"]) == ("keep", "running, unchanged")
        data = report(node.run("apply", "demo", "--json"))
        assert (data["a"]["status"], data["a"]["reason"]) == ("running", "already running")
        assert node.pid("a") == pid

    def test_dry_run_restarts_a_process_started_with_another_fingerprint(self, node: Node) -> None:
        """A process started with another definition than the one planned, which the last apply
        did not record (an interrupted apply of an earlier definition): the dry run says
        restart with the reason apply then gives. Before, the dry run went by the record and
        named every part of the definition as changed."""
        node.services.append(sleeper("a"))
        _started_as(node, sleeper("a", args=["earlier"]))
        wait_until(lambda: (node.root / "run/a.pid").exists(), "a up")
        rows = _dry_run(node)
        assert (rows["a"]["action"], rows["a"]["why"]) == ("restart", "definition changed")
        data = report(node.run("apply", "demo", "--json"))
        assert (data["a"]["status"], data["a"]["reason"]) == (
            "restarted",
            "restarted: definition changed",
        )


def _started_as(node: Node, service: noderole.Service) -> None:
    """Start ``service`` through the native backend with the fingerprint apply gives a process
    of that definition (no certificate, no file written), recording nothing else."""
    from noderole.engine import definition_digests, process_fingerprint

    fingerprint = process_fingerprint(definition_digests(service), [], {})
    node.app().backend("native").start(service, fingerprint=fingerprint)


def _dry_run(node: Node) -> dict[str, dict[str, Any]]:
    result = node.run("apply", "demo", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    return {r["name"]: r for r in json.loads(result.stdout)["services"]}


def _apply_stops(node: Node, role: str, name: str, pid: int) -> None:
    """`apply ROLE` stops service ``name`` (``pid``), which left the plan, saying so; then a
    stop ends everything."""
    done = node.run("apply", role)
    assert done.exit_code == 0, done.output
    assert f"stopped {name}: no longer in the plan of role {role}" in done.stderr
    wait_until(lambda: not is_alive(pid), f"{name} to end")
    assert node.run("stop").exit_code == 0
    wait_until(lambda: not node.processes(), "everything to end, the supervisor too")


def _applied_with_another_role(node: Node) -> int:
    """Role demo (service old) applied, role other (service new) defined; old's pid."""
    node.services.append(sleeper("old", roles=["demo"]))
    node.services.append(sleeper("new", roles=["other"]))
    assert node.run("apply", "demo").exit_code == 0
    return node.pid("old")


class TestAStoppedSupervisor:
    """The supervisor stopped by a signal (or hung): nothing is supervised, and a service that
    exits stays gone. Before, `status` showed each service as last recorded (a dead one
    "ready" with its old pid) and exited 0, `status --wait` polled until its timeout, one
    warning a poll, and `apply` said "already running [ok]" and exited 0."""

    @staticmethod
    def _stopped_with_b_killed(node: Node) -> tuple[int, int, int]:
        """Role demo applied (a, b; c never ready), the daemon SIGSTOPped, then b's process
        SIGKILLed: (daemon, a's pid, b's pid). The caller resumes the daemon."""
        node.services += [
            sleeper("a"),
            sleeper("b"),
            sleeper("c", readiness=noderole.WaitForPaths(paths=["/run/never"], timeout=600)),
        ]
        assert node.run("apply", "demo").exit_code == 0
        a, b = node.pid("a"), node.pid("b")
        [daemon], _ = supervisor_processes(node.root)
        os.kill(daemon, signal.SIGSTOP)
        os.kill(b, signal.SIGKILL)
        wait_until(lambda: not is_alive(b), "b's process to end")
        return daemon, a, b

    def test_status_shows_what_runs_and_exits_10(self, node: Node) -> None:
        daemon = 0
        try:
            daemon, a, b = self._stopped_with_b_killed(node)
            shown = node.run("status", "--json")
            table = node.run("status")
        finally:
            if daemon:
                os.kill(daemon, signal.SIGCONT)
        assert shown.exit_code == 10, shown.output
        document = json.loads(shown.stdout)
        assert document["verdict"] == "backend"
        rows = {r["name"]: r for r in document["services"]}
        assert (rows["a"]["state"], rows["a"]["pid"]) == ("running", a)
        assert (rows["b"]["state"], rows["b"]["pid"]) == ("crashed", None)
        assert f"its process {b} is gone" in rows["b"]["reason"]
        assert all(r["unsupervised"] for r in rows.values())
        assert shown.stderr.count("not answering") == 1
        assert f"kill -CONT {daemon}" in shown.stderr
        # The table: a note under every row, the ones still up included.
        assert table.exit_code == 10
        notes = [line for line in table.stdout.splitlines() if "not answering" in line]
        assert len(notes) == 3, table.stdout

    def test_status_wait_ends_at_once(self, node: Node) -> None:
        """c is still starting (never ready): `status --wait` stops waiting at the first look,
        with one warning, exit 10. The clock is a fake one: only looks could move it."""
        from noderole.clock import FakeClock
        from tests.test_failure_path import run_with

        clock = FakeClock()
        daemon = 0
        try:
            daemon, _, _ = self._stopped_with_b_killed(node)
            began = clock.monotonic()
            waited = run_with(node, clock, "status", "--wait", "--timeout", "1")
        finally:
            if daemon:
                os.kill(daemon, signal.SIGCONT)
        assert waited.exit_code == 10, waited.output
        assert waited.stderr.count("not answering") == 1, waited.stderr
        assert clock.monotonic() == began  # no poll slept

    def test_apply_fails_at_once_naming_the_fix(self, node: Node) -> None:
        daemon = 0
        try:
            daemon, _, b = self._stopped_with_b_killed(node)
            again = node.run("apply", "demo")
        finally:
            if daemon:
                os.kill(daemon, signal.SIGCONT)
        assert again.exit_code == 10, again.output
        assert "already running" not in again.stdout
        assert again.stderr.startswith("noderole: error: the native supervisor (pid ")
        assert f"`kill -CONT {daemon}` resumes it" in again.stderr
        assert f"`kill -9 {daemon}` ends it" in again.stderr
        assert "`noderole apply`" in again.stderr
        # Resumed, the supervisor respawns b; the next apply finds it running.
        wait_until(lambda: node.pid("b") != b and is_alive(node.pid("b")), "b respawned")
        assert node.run("apply", "demo").exit_code == 0

    def test_dry_run_and_a_stop_that_would_stop_what_needs_it_fail_as_apply(
        self, node: Node
    ) -> None:
        """`apply --dry-run` judged on the recorded state (`keep`, exit 0) where the apply
        fails at once (exit 10); `stop a`, with d needing a, said ` * Stopping d (it needs a)`
        and then failed, nothing stopped. Both fail first now, saying nothing else."""
        node.services.append(sleeper("d", need=["a"]))
        daemon = 0
        try:
            daemon, _, _ = self._stopped_with_b_killed(node)
            dry = node.run("apply", "demo", "--dry-run")
            stop = node.run("stop", "a")
        finally:
            if daemon:
                os.kill(daemon, signal.SIGCONT)
        assert dry.exit_code == 10, dry.output
        assert "keep" not in dry.stdout
        assert stop.exit_code == 10, stop.output
        assert "Stopping" not in stop.stdout
        assert is_alive(node.pid("d"))


class TestServicesThatLeaveThePlan:
    """A service the last apply started is not in the plan any more: the role changed
    (`apply agent` on a node applied as `server`), a plugin no longer defines it (renamed,
    removed, disabled). Before, it ran on: `status` did not show it, `stop` did not stop it,
    and a node changed from server to agent ran both k3s server and k3s agent."""

    def test_a_role_change_stops_the_old_roles_services(self, node: Node) -> None:
        old = _applied_with_another_role(node)
        changed = node.run("apply", "other")
        assert changed.exit_code == 0, changed.output
        assert "stopped old: no longer in the plan of role other" in changed.stderr
        wait_until(lambda: not is_alive(old), "the old role's service to end")
        status = node.run("status", "--json")
        assert [row["name"] for row in json.loads(status.stdout)["services"]] == ["new"]
        assert node.run("stop").exit_code == 0
        wait_until(lambda: not node.processes(), "everything to end, the supervisor too")

    def test_a_service_its_plugin_no_longer_defines_is_stopped(self, node: Node) -> None:
        node.services.extend([sleeper("a"), sleeper("b")])
        assert node.run("apply", "demo").exit_code == 0
        b = node.pid("b")
        del node.services[1]
        _apply_stops(node, "demo", "b", b)

    def test_status_and_stop_follow_what_runs_after_the_next_role_changed(self, node: Node) -> None:
        """`enable agent` (or `render agent`) on a node running role server records agent for
        the next apply while server's services run on. Before, `status` showed agent's
        services, stopped, and `stop` said "Not running" and stopped nothing: what ran was
        out of reach. Both are now about the role last applied, with a warning."""
        from noderole.state import write_role

        old = _applied_with_another_role(node)
        write_role(NodeRoot(node.root), "other")  # what `enable other` records
        status = node.run("status", "--json")
        assert status.exit_code == 0, status.output
        assert [row["name"] for row in json.loads(status.stdout)["services"]] == ["old"]
        assert "role other is recorded for the next apply" in status.stderr
        stopped = node.run("stop")
        assert stopped.exit_code == 0, stopped.output
        assert stopped.stdout.splitlines() == [" * Stopped old"]
        assert not is_alive(old)
        wait_until(lambda: not node.processes(), "everything to end, the supervisor too")

    def test_reset_stops_what_runs_after_the_next_role_changed(self, node: Node) -> None:
        """`enable other` on a node running role demo: reset stopped other's services (none
        running) and said nothing of demo's, which the supervisor's shutdown ended unreported
        (under an init system, they ran on). It resets the role last applied."""
        from noderole.state import write_role

        old = _applied_with_another_role(node)
        write_role(NodeRoot(node.root), "other")  # what `enable other` records
        dry = json.loads(node.run("reset", "--dry-run", "--json").stdout)
        assert dry["role"] == "demo"
        assert dry["stopped"] == ["old"]
        done = node.run("reset", "--json")
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["stopped"] == ["old"]
        assert not is_alive(old)
        wait_until(lambda: not node.processes(), "everything to end, the supervisor too")

    def test_status_of_a_service_of_the_next_role(self, node: Node) -> None:
        """`status SERVICE` for a service of the role recorded for the next apply (not of the
        one last applied) said "unknown role"; it shows the service, and no warning that the
        last applied role is shown."""
        from noderole.state import write_role

        _applied_with_another_role(node)
        write_role(NodeRoot(node.root), "other")
        shown = node.run("status", "new", "--json")
        assert [row["name"] for row in json.loads(shown.stdout)["services"]] == ["new"]
        assert "recorded for the next apply" not in shown.stderr
        whole = node.run("status", "other", "--json")
        assert [row["name"] for row in json.loads(whole.stdout)["services"]] == ["new"]
        assert "recorded for the next apply" not in whole.stderr
        assert node.run("stop").exit_code == 0
        wait_until(lambda: not node.processes(), "everything to end, the supervisor too")

    @pytest.mark.parametrize("damage", ["newer", "not json", "absent", "other backend"])
    def test_a_role_change_without_a_usable_record_still_stops_them(
        self, node: Node, damage: str
    ) -> None:
        """The recorded plan cannot tell what the last apply started (written by a newer
        noderole, damaged, removed, or of another backend): the native supervisor itself knows
        what it runs. Before, `apply other` went on beside the old role's service, which no
        `status` or `stop` reached any more."""
        old = _applied_with_another_role(node)
        plan = node.root / "var/lib/noderole/plan.json"
        if damage == "absent":
            plan.unlink()
        elif damage == "not json":
            plan.write_text("{")
        else:
            data = json.loads(plan.read_text())
            data.update({"newer": {"version": 2}, "other backend": {"backend": "openrc"}}[damage])
            plan.write_text(json.dumps(data))
        _apply_stops(node, "other", "old", old)

    def test_without_a_usable_record_a_broken_plugins_services_are_kept(self, node: Node) -> None:
        """No usable record and a plugin that failed to load: nothing tells which of the
        services the supervisor runs were that plugin's, so none is stopped, and the warning
        names them and the way out: `stop` of the whole role stops what the supervisor runs
        outside its plan too."""
        node.services.append(sleeper("old", roles=["demo"]))
        assert node.run("apply", "demo").exit_code == 0
        old = node.pid("old")
        (node.root / "var/lib/noderole/plan.json").unlink()
        node.services.append(sleeper("new", roles=["other"]))
        node.broken_plugin = True
        changed = node.run("apply", "other")
        assert "old runs under the native supervisor" in changed.stderr, changed.output
        assert "`noderole stop` stops them with the whole role" in changed.stderr
        assert is_alive(old)
        stopped = node.run("stop")
        assert stopped.exit_code == 0, stopped.output
        assert " * Stopped old (not in the plan of role other)" in stopped.stdout
        wait_until(lambda: not node.processes(), "everything to end, the supervisor too")


class TestSupervision:
    def test_kill_respawns_and_status_counts_it(self, node: Node) -> None:
        """kill -9 of a child: it comes back with a new pid; status shows one restart."""
        node.services.append(sleeper("a"))
        node.run("apply", "demo")
        old = node.pid("a")
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: (node.root / "run/a.pid").exists() and node.pid("a") != old, "respawn")
        status = json.loads(node.run("status", "--json").stdout)
        (row,) = status["services"]
        assert row["state"] == "running"
        assert row["restarts"] == 1
        assert row["last_exit"] == "signal SIGKILL"

    def test_stop_leaves_no_process(self, node: Node) -> None:
        """stop returns only when every process, the supervisor's included, is gone."""
        node.services += [sleeper("a"), sleeper("b", after=["a"])]
        node.run("apply", "demo")
        result = node.run("stop")
        assert result.stdout.splitlines() == [" * Stopped b", " * Stopped a"]
        wait_until(lambda: not node.processes(), "the supervisor to exit")
        status = node.run("status", "--json")
        assert status.exit_code == 1
        assert {r["state"] for r in json.loads(status.stdout)["services"]} == {"stopped"}

    def test_supervisor_killed_then_apply_gives_one_instance(self, node: Node) -> None:
        """After the supervisor is SIGKILLed, apply again leaves exactly one instance."""
        node.services.append(sleeper("a"))
        node.run("apply", "demo")
        # The daemon and its watchdog, by what they are: "not the sleeper" also took the
        # sleeper's `sleep 1`, which may have ended by the kill (ProcessLookupError, under load).
        daemons, watchdogs = supervisor_processes(node.root)
        assert (len(daemons), len(watchdogs)) == (1, 1), (daemons, watchdogs)
        for pid in daemons + watchdogs:
            os.kill(pid, signal.SIGKILL)
        node.run("apply", "demo")

        def instances() -> list[int]:
            found = [p for p in node.processes() if b"/usr/local/bin/sleeper" in _cmdline(p)]
            # The sleeper's own per-second fork shares its command line until it execs.
            return [p for p in found if _parent(p) not in found]

        # The old instance dies at the new daemon's recovery: wait for the settled answer.
        wait_until(lambda: instances() == [node.pid("a")], "exactly one instance")

    def test_supervisor_killed_during_apply_fails_what_waits_at_once(self, node: Node) -> None:
        """The daemon SIGKILLed (an OOM kill) while a dependent waits: its watchdog ends the
        started service, and the dependent fails at once naming why, not after its wait's
        bound. Before, b waited out its 120 s for a file that a dead a would never write,
        while status already said a was stopped."""
        import threading

        node.services += [
            sleeper("a"),
            sleeper(
                "b",
                need=["a"],
                pre_start=[
                    # b's steps begin once a's start was answered and reported: a kill that
                    # landed before the answer (a.pid written, the reply not yet sent) had the
                    # client start a new daemon and send the start again, rightly: a ran.
                    noderole.WriteFile(path="/run/b-began", content=""),
                    noderole.WaitForPaths(paths=["/run/never"], timeout=120),
                ],
            ),
        ]

        def kill_the_daemon() -> None:
            wait_until(lambda: (node.root / "run/b-began").exists(), "a started, b waiting")
            daemons = wait_until(lambda: supervisor_processes(node.root)[0], "the daemon")
            os.kill(daemons[0], signal.SIGKILL)

        killer = threading.Thread(target=kill_the_daemon)
        killer.start()
        try:
            data = report(node.run("apply", "demo", "--json"))
        finally:
            killer.join()
        assert data["a"]["status"] == "failed"
        assert data["a"]["reason"].startswith("stopped after start: the supervisor is not")
        assert data["b"]["status"] == "skipped", data["b"]
        assert "a stopped after start" in data["b"]["reason"]

    def test_stop_after_the_supervisor_and_its_watchdog_were_killed_says_what_it_ended(
        self, node: Node
    ) -> None:
        """Both killed at once, the services run on; `stop` starts a supervisor that ends them
        as it starts, and says so, with the pids it killed. Before, it said "Not running: b,
        a": every service read stopped from the state file, though its process was running."""
        import re

        node.services += [sleeper("a"), sleeper("b", after=["a"])]
        assert node.run("apply", "demo").exit_code == 0
        a, b = node.pid("a"), node.pid("b")
        daemons, watchdogs = supervisor_processes(node.root)
        assert (len(daemons), len(watchdogs)) == (1, 1), (daemons, watchdogs)
        # Both stopped first, then killed: neither can act on the other's death (the watchdog
        # would end the services, the daemon fork another watchdog).
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in daemons + watchdogs:
                os.kill(pid, sig)
        wait_until(lambda: supervisor_processes(node.root) == ([], []), "both to be gone")
        assert is_alive(a)
        assert is_alive(b)
        result = node.run("stop")
        assert result.exit_code == 0, result.output
        [line] = result.stdout.splitlines()
        head = " * Stopped leftover processes of a killed supervisor: "
        assert line.startswith(head), line
        ended = {n: p.split() for n, p in re.findall(r"(\w+) \(pids? ([\d ]+)\)", line)}
        assert list(ended) == ["b", "a"], line
        assert str(a) in ended["a"], line
        assert str(b) in ended["b"], line
        assert not is_alive(a)
        assert not is_alive(b)
        wait_until(lambda: not node.processes(), "everything to end, the supervisor too")

    def test_restart_runs_steps_again(self, node: Node) -> None:
        """restart SERVICE stops it and starts it again with a new pid."""
        node.services.append(sleeper("a", pre_start=[noderole.MakeDirectories(paths=["/run/a"])]))
        node.run("apply", "demo")
        old = node.pid("a")
        (node.root / "run/a").rmdir()
        result = node.run("restart", "a")
        assert result.exit_code == 0, result.output
        assert (node.root / "run/a").is_dir()
        assert node.pid("a") != old

    def test_restart_of_a_service_with_dependencies(self, node: Node) -> None:
        """restart b, which comes after a: b gets a new pid and a keeps running untouched."""
        node.services += [sleeper("a"), sleeper("b", need=["a"], after=["a"])]
        node.run("apply", "demo")
        a, b = node.pid("a"), node.pid("b")
        result = node.run("restart", "b")
        assert result.exit_code == 0, result.output
        assert node.pid("a") == a
        assert node.pid("b") != b


class TestStopWhatNeedsIt:
    """`need` keeps OpenRC's meaning (systemd's `Requires=`) at a stop too: stopping a service
    stops first what needs it, and a restart starts that again after it. `want`, `use` and
    `after` only order starts."""

    def test_stop_stops_what_needs_it_first_and_says_why(self, node: Node) -> None:
        """`stop hdep` stops huser (it needs hdep) and top (it needs huser) first, last
        started first, naming why; what only wants, uses or starts after hdep runs on. Before,
        huser and top ran on, needing a stopped hdep, and nothing said so (while OpenRC and
        systemd stopped them)."""
        node.services += [
            sleeper("hdep"),
            sleeper("huser", need=["hdep"]),
            sleeper("top", need=["huser"]),
            sleeper("wanter", want=["hdep"]),
            sleeper("user", use=["hdep"]),
            sleeper("later", after=["hdep"]),
        ]
        assert node.run("apply", "demo").exit_code == 0
        pids = {s.name: node.pid(s.name) for s in node.services}
        result = node.run("stop", "hdep")
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == [
            " * Stopping top (it needs huser)",
            " * Stopping huser (it needs hdep)",
            " * Stopped top",
            " * Stopped huser",
            " * Stopped hdep",
        ]
        for name in ("hdep", "huser", "top"):
            assert not is_alive(pids[name]), name
        rows = {r["name"]: r for r in json.loads(node.run("status", "--json").stdout)["services"]}
        assert {n: rows[n]["state"] for n in ("wanter", "user", "later")} == dict.fromkeys(
            ("wanter", "user", "later"), "running"
        )
        assert [rows[n]["pid"] for n in ("wanter", "user", "later")] == [
            pids["wanter"],
            pids["user"],
            pids["later"],
        ]

    def test_a_need_through_a_virtual_name_or_a_milestone_stops_too(self, node: Node) -> None:
        """A service that needs a virtual name needs every planned provider of it, so it stops
        with any of them, and one that needs a milestone needing the stopped service stops
        too; the reason names the way."""
        node.services += [
            sleeper("gate-one", provide=["gate"]),
            sleeper("worker", need=["gate"]),
            noderole.Service(name="milestone", roles=["demo"], need=["gate-one"]),
            sleeper("late", need=["milestone"]),
        ]
        assert node.run("apply", "demo").exit_code == 0
        result = node.run("stop", "gate-one")
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == [
            " * Stopping late (it needs milestone, which needs gate-one)",
            " * Stopping worker (it needs gate, which gate-one provides)",
            " * Stopped late",
            " * Stopped worker",
            " * Stopped gate-one",
        ]

    def test_restart_restarts_what_needs_it_and_ran_after_it(self, node: Node) -> None:
        """`restart hdep` stops huser first, starts hdep, then huser again; a service that needs
        hdep and was not running stays stopped, and one that starts after hdep is left alone.
        Before, huser ran on, untouched, under the native supervisor (and systemd and OpenRC
        left it stopped)."""
        node.services += [
            sleeper("hdep"),
            sleeper("huser", need=["hdep"]),
            sleeper("idle", need=["hdep"]),
            sleeper("later", after=["hdep"]),
        ]
        assert node.run("apply", "demo").exit_code == 0
        assert node.run("stop", "idle").exit_code == 0
        pids = {name: node.pid(name) for name in ("hdep", "huser", "later")}
        result = node.run("restart", "hdep")
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert lines[0] == " * Stopping huser (it needs hdep)", lines
        started = [line.split()[2] for line in lines if line.startswith(" * Starting ")]
        assert started == ["hdep", "huser"], lines
        rows = {r["name"]: r for r in json.loads(node.run("status", "--json").stdout)["services"]}
        assert (rows["hdep"]["state"], rows["huser"]["state"]) == ("running", "running")
        assert rows["hdep"]["pid"] != pids["hdep"]
        assert rows["huser"]["pid"] != pids["huser"]
        assert rows["later"]["pid"] == pids["later"]
        assert rows["idle"]["state"] == "stopped"


class TestInterruptedApply:
    def test_ctrl_c_stops_the_other_threads_before_the_apply_leaves(self, tmp_path: Path) -> None:
        """Ctrl-C while the caller waits in one service and another thread waits in another:
        the apply starts nothing more, ends the other wait, and leaves only once that thread
        is done. Before, it left at once and the other thread ran on: its next step wrote
        into the node after the caller had moved on (a rehearsal had already removed its
        scratch root, which the step made again)."""
        from noderole.plan import build_plan

        (tmp_path / "run").mkdir()
        services = [
            noderole.Service(
                name="a",
                roles=["demo"],
                pre_start=[noderole.WaitForPaths(paths=["/run/a-never"], timeout=60)],
            ),
            noderole.Service(
                name="b",
                roles=["demo"],
                pre_start=[
                    noderole.WaitForPaths(paths=["/run/b-go"], timeout=60),
                    noderole.WriteFile(path="/etc/b-late", content="late\n"),
                ],
            ),
        ]
        plan = build_plan(services, "demo")

        def b_waiting() -> list[threading.Thread]:
            return [t for t in threading.enumerate() if t.name == "apply:b"]

        def interrupt_once_b_waits() -> None:
            wait_until(b_waiting, "b to wait in a thread of its own")
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

        _interrupted_apply(plan, tmp_path, interrupt_once_b_waits)
        assert b_waiting() == []  # ended before the apply left
        (tmp_path / "run/b-go").write_text("")  # what b waited for, too late
        assert not (tmp_path / "etc/b-late").exists()

    def test_a_signal_another_thread_takes_still_reaches_the_waiting_caller(
        self, tmp_path: Path
    ) -> None:
        """The caller, done with its own services, waited for the crash watcher with a join
        that had no timeout. Python runs a signal's handler in the main thread only, and a
        signal the kernel gives another thread (any thread may take a process-directed one)
        does not wake the main thread's wait: the Ctrl-C or SIGTERM waited until the last
        service was done. The signal is given to b's thread here, which the main thread's
        wait cannot notice."""
        from noderole.plan import build_plan

        (tmp_path / "run").mkdir()
        services = [
            noderole.Service(
                name="a",
                roles=["demo"],
                pre_start=[noderole.WaitForPaths(paths=["/run/a-go"], timeout=60)],
            ),
            noderole.Service(
                name="b",
                roles=["demo"],
                pre_start=[noderole.WaitForPaths(paths=["/run/b-go"], timeout=60)],
            ),
        ]
        plan = build_plan(services, "demo")
        main = threading.main_thread().ident

        def b_waiting() -> list[threading.Thread]:
            return [t for t in threading.enumerate() if t.name == "apply:b"]

        def caller_joins_the_watcher() -> bool:
            """The main thread is in drive's join of the watcher, blocked in its lock."""
            frame = sys._current_frames().get(main or 0)
            if frame is None or frame.f_code.co_name != "_wait_for_tstate_lock":
                return False
            while frame is not None:
                if frame.f_code.co_name == "drive":
                    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
                    return line.strip().startswith("self.watcher.join")
                frame = frame.f_back
            return False

        unheard: list[str] = []

        def interrupt_through_b() -> None:
            threads = wait_until(b_waiting, "b to wait in a thread of its own")
            (tmp_path / "run/a-go").write_text("")  # the caller finishes a, then waits
            wait_until(caller_joins_the_watcher, "the caller to wait for the watcher")
            signal.pthread_kill(threads[0].ident or 0, signal.SIGINT)
            try:
                wait_until(lambda: not b_waiting(), "the interrupt to end b's wait", timeout=15)
            except pytest.fail.Exception as exc:
                unheard.append(str(exc))
                (tmp_path / "run/b-go").write_text("")  # let the apply end, and the test

        _interrupted_apply(plan, tmp_path, interrupt_through_b)
        assert unheard == []


def _interrupted_apply(plan: Any, root: Path, interrupter: Callable[[], None]) -> None:
    """Apply ``plan`` in this (the main) thread while ``interrupter`` runs in another, and
    expect the apply to end in KeyboardInterrupt; the other thread is waited for."""
    from noderole.console import QuietProgress
    from noderole.engine import apply_plan
    from noderole.testing import RecordingBackend

    thread = threading.Thread(target=interrupter)
    thread.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            apply_plan(
                plan,
                root=NodeRoot(root),
                clock=SystemClock(),
                backend=RecordingBackend(root),
                progress=QuietProgress(),
            )
    finally:
        thread.join()


class TestStartUnderWay:
    def test_a_start_still_under_way_is_reported_with_its_reason(self, tmp_path: Path) -> None:
        """A backend that lets go of a start still under way (systemd: the job queued behind
        its After= units past the bound) says why; the report keeps it. Before, the words
        were dropped and the service read "Started" as if it ran."""
        from noderole.clock import SystemClock
        from noderole.console import QuietProgress
        from noderole.engine import apply_plan
        from noderole.plan import build_plan
        from noderole.supervisor import ServiceStatus

        class Queued(RecordingBackend):
            def start(self, service: noderole.Service, *, fingerprint: str) -> ServiceStatus:
                super().start(service, fingerprint=fingerprint)
                return ServiceStatus(
                    name=service.name,
                    state="starting",
                    fingerprint=fingerprint,
                    reason="start job still queued after 30s, waiting for network-online.target",
                )

        plan = build_plan([noderole.Service(name="k", roles=["r"], command=["/bin/k"])], "r")
        result = apply_plan(
            plan,
            root=NodeRoot(tmp_path),
            clock=SystemClock(),
            backend=Queued(tmp_path),
            progress=QuietProgress(),
        )
        (only,) = result.services
        assert (only.status, only.reason) == (
            "started",
            "start job still queued after 30s, waiting for network-online.target",
        )


class TestLock:
    def test_second_apply_refuses_when_lock_is_held(self, node: Node) -> None:
        """While another run holds the node lock, apply refuses with a clear message."""
        node.services.append(sleeper("a"))
        holding = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with node_lock(NodeRoot(node.root), timeout=1, clock=SystemClock(), what="apply other"):
                holding.set()
                release.wait(10)

        thread = threading.Thread(target=hold)
        thread.start()
        try:
            holding.wait(5)
            result = CliRunner().invoke(
                cli, ["apply", "demo", "--lock-timeout", "0"], obj=node.app()
            )
            assert result.exit_code == LockedError.exit_code
            assert "another noderole run holds /run/noderole/apply.lock" in result.stderr
            assert "apply other" in result.stderr
        finally:
            release.set()
            thread.join()
        assert node.processes() == []


class TestBootCommands:
    def test_hook_start_pre_runs_steps_and_fails_with_reason(self, node: Node) -> None:
        """`noderole hook NAME start-pre` runs the steps; a failing one exits 1 with its reason."""
        node.services += [
            sleeper("a", pre_start=[noderole.MakeDirectories(paths=["/run/a"])]),
            sleeper("b", pre_start=[noderole.Fail(message="EKS_X empty")]),
        ]
        assert node.run("hook", "a", "start-pre").exit_code == 0
        assert (node.root / "run/a").is_dir()
        failed = node.run("hook", "b", "start-pre")
        assert failed.exit_code == 1
        assert "EKS_X empty" in failed.stderr

    def test_hook_unknown_service(self, node: Node) -> None:
        """An unknown service name is a usage error listing the known ones."""
        result = CliRunner().invoke(cli, ["hook", "nope", "start-pre"], obj=node.app())
        assert result.exit_code == 2
        assert "no installed plugin defines service 'nope'" in result.stderr

    def test_hook_misspelled_service_names_the_closest(self, node: Node) -> None:
        """A runscript or unit with a typo in the service's name (edited by hand at 3 a.m.)
        hears the name it probably meant."""
        node.services.append(sleeper("konnectivity-server"))
        result = CliRunner().invoke(
            cli, ["hook", "konectivity-server", "start-pre"], obj=node.app()
        )
        assert result.exit_code == 2
        assert (
            "no installed plugin defines service 'konectivity-server' "
            "(did you mean 'konnectivity-server'?) (services: " in result.stderr
        )

    def test_a_misspelled_service_names_the_closest_everywhere(self, node: Node) -> None:
        """restart, stop and status of a misspelled service of the applied role say which one
        it probably is; status, which takes a role or a service, says it is neither."""
        node.services.append(sleeper("konnectivity-server"))
        assert node.run("apply", "demo").exit_code == 0
        hint = "(did you mean 'konnectivity-server'?)"
        for command in ("restart", "stop"):
            result = node.run(command, "konectivity-server")
            assert result.exit_code == 2
            assert f"konectivity-server {hint}: not a service of role demo" in result.stderr
        result = node.run("status", "konectivity-server")
        assert result.exit_code == 6
        assert (
            f"'konectivity-server' is not a service of role demo {hint}, nor a role: "
            "unknown role 'konectivity-server'" in " ".join(result.stderr.split())
        )

    def test_exec_runs_the_resolved_command(self, node: Node, tmp_path: Path) -> None:
        """`noderole exec NAME` replaces itself with the service's argv and environment."""
        import subprocess
        import sys

        script = node.root / "usr/local/bin/show"
        script.write_text('#!/bin/sh\necho "$0 $* TOKEN=$TOKEN"\n')
        script.chmod(0o755)
        plugin = tmp_path / "execplugin.py"
        plugin.write_text(
            "import noderole\n"
            "@noderole.hookimpl\n"
            "def noderole_services(node):\n"
            "    return noderole.Service(name='show', command=['/usr/local/bin/show', 'a b'],\n"
            "        environment={'TOKEN': noderole.Secret('t0k')})\n"
        )
        code = (
            f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import execplugin\n"
            "from noderole.cli import cli; from noderole.cli._app import App\n"
            "from noderole.root import NodeRoot\n"
            f"cli.main(['exec', 'show'], obj=App(root=NodeRoot({str(node.root)!r}), "
            "plugin_objects=(('e', execplugin),), autoload=False))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
        # for a #! script the kernel passes the script's own (root-resolved) path as $0
        assert done.stdout.strip() == f"{script} a b TOKEN=t0k", done.stderr


class TestRehearse:
    def test_rehearsal_applies_stands_down_and_cleans_up(self) -> None:
        """rehearse writes stand-ins in a scratch root, applies, shows status, stops, removes it."""
        module = types.ModuleType("rehearsed")

        def noderole_services(node: Any) -> list[noderole.Service]:
            return [
                noderole.Service(
                    name="demo",
                    roles=["demo"],
                    command=["/usr/local/bin/demo"],
                    pre_start=[noderole.WaitForPaths(paths=["/etc/demo.env"], timeout=5)],
                )
            ]

        def noderole_standins(node: Any) -> list[noderole.StandIn]:
            return [
                noderole.StandIn(path="/usr/local/bin/demo", content=SLEEPER),
                noderole.StandIn(path="/etc/demo.env", content="X=1\n", mode=0o600),
            ]

        module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
        module.noderole_standins = noderole.hookimpl(noderole_standins)  # type: ignore[attr-defined]
        app = App(root=NodeRoot("/"), plugin_objects=(("r", module),), autoload=False)
        result = CliRunner().invoke(cli, ["rehearse", "demo"], obj=app, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        scratch = Path(result.stdout.splitlines()[0].split(" in ", 1)[1])
        assert " * Started demo" in result.stdout
        assert "demo                       running" in result.stdout
        assert not scratch.exists()
        assert node_processes(scratch) == []


class TestRenderOnANodeTheNativeSupervisorRuns:
    def test_status_and_stop_go_on_reaching_the_running_services(self, node: Node) -> None:
        """render for an image, on a node whose services the native supervisor runs: status
        and stop must still reach them. Before, render recorded its backend as the node's,
        and both exited 10 ("backend openrc needs rc-service") while the services ran on."""
        node.services.append(sleeper("a"))
        assert node.run("apply", "demo").exit_code == 0
        rendered = node.run("render", "demo", "--backend", "openrc")
        assert rendered.exit_code == 0, rendered.output
        assert "the native supervisor runs this node's services" in rendered.stderr
        assert (node.root / "etc/init.d/a").exists()
        status = node.run("status")
        assert status.exit_code == 0, status.output
        assert node.run("stop").exit_code == 0
        wait_until(lambda: not node.processes(), "everything to end, the supervisor too")


class TestRender:
    def test_render_writes_verified_units_and_is_deterministic(self, node: Node) -> None:
        """render writes units systemd-analyze verifies; a second render changes nothing."""
        import shutil
        import subprocess

        node.services += [sleeper("a", need=["net"]), sleeper("b", after=["a"])]
        first = node.run("render", "demo", "--backend", "systemd")
        assert first.exit_code == 0, first.output
        assert "written   /etc/systemd/system/a.service" in first.stdout
        second = node.run("render", "demo", "--backend", "systemd")
        assert all(line.startswith("unchanged") for line in second.stdout.splitlines())
        unit = (node.root / "etc/systemd/system/a.service").read_text()
        assert str(node.root) not in unit
        if shutil.which("systemd-analyze") is None:
            pytest.skip("systemd-analyze is not installed")
        for unit_dir in ("lib/systemd/system",):
            (node.root / unit_dir).mkdir(parents=True, exist_ok=True)
            for name in (
                "multi-user.target",
                "network-online.target",
                "basic.target",
                "sysinit.target",
                "network.target",
                "shutdown.target",
            ):
                src = Path("/lib/systemd/system") / name
                if src.exists():
                    shutil.copy(src, node.root / unit_dir / name)
        noderole_bin = node.root / "usr/local/bin/noderole"
        noderole_bin.write_text("#!/bin/sh\n")
        noderole_bin.chmod(0o755)
        done = subprocess.run(
            ["systemd-analyze", "verify", f"--root={node.root}", "/etc/systemd/system/a.service"],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr

    def test_render_removes_what_left_the_role(self, node: Node) -> None:
        """A service dropped from the role loses its unit and its enablement at the next render."""
        node.services += [sleeper("a"), sleeper("b")]
        node.run("render", "demo", "--backend", "systemd")
        unit = node.root / "etc/systemd/system/b.service"
        wants = node.root / "etc/systemd/system/multi-user.target.wants/b.service"
        assert unit.exists()
        assert wants.is_symlink()
        user_file = node.root / "etc/systemd/system/mine.service"
        user_file.write_text("[Service]\nExecStart=/bin/true\n")
        del node.services[1]
        result = node.run("render", "demo", "--backend", "systemd")
        assert "removed   /etc/systemd/system/b.service" in result.stdout
        assert not unit.exists()
        assert not wants.is_symlink()
        assert (node.root / "etc/systemd/system/a.service").exists()
        assert user_file.exists()  # only what noderole wrote is ever removed


class TestRenderOverTheNodesOwn:
    def test_render_refuses_to_take_a_packaged_units_place(self, node: Node) -> None:
        """`render` of a role with a service named like a packaged unit exits 10 (backend),
        naming the unit and the fix, and writes none of the role's files."""
        packaged = node.root / "lib/systemd/system/cron.service"
        packaged.parent.mkdir(parents=True)
        packaged.write_text("[Service]\nExecStart=/usr/sbin/cron -f\n")
        node.services += [sleeper("a"), sleeper("cron")]
        result = node.run("render", "demo", "--backend", "systemd")
        assert result.exit_code == 10, result.output
        assert "refusing to write /etc/systemd/system/cron.service: " in result.output
        assert "rename the service" in result.output
        assert not (node.root / "etc/systemd/system/a.service").exists()


class _Trace:
    """Progress that records, in one order, each service's start and finish and its thread (the
    object, kept alive: an ended thread's ident can be given to the next)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, threading.Thread]] = []

    def starting(self, name: str, description: str) -> None:
        with self.lock:
            self.events.append(("start", name, threading.current_thread()))

    def waiting(self, name: str, what: str) -> None:
        pass

    def finished(self, report: Any) -> None:
        with self.lock:
            self.events.append(("finish", report.name, threading.current_thread()))

    def index(self, kind: str, name: str) -> int:
        return self.events.index((kind, name, self.thread(name)))

    def thread(self, name: str) -> threading.Thread:
        return next(thread for kind, n, thread in self.events if n == name)


def _apply_traced(
    services: list[noderole.Service],
    tmp_path: Path,
    *,
    backend: RecordingBackend | None = None,
    clock: Any = None,
) -> tuple[Any, _Trace]:
    from noderole.engine import apply_plan
    from noderole.plan import build_plan
    from noderole.testing import FakeClock

    trace = _Trace()
    applied = apply_plan(
        build_plan(services, "r"),
        root=NodeRoot(tmp_path),
        clock=clock if clock is not None else FakeClock(),
        backend=backend if backend is not None else RecordingBackend(tmp_path),
        progress=trace,
    )
    return applied, trace


def _service(name: str, **words: Any) -> noderole.Service:
    return noderole.Service(name=name, roles=["r"], command=[f"/bin/{name}"], **words)


class TestSchedule:
    """The engine's schedule: a service runs once, after everything it comes after, and a
    service's thread runs next what its end made ready."""

    def test_a_chain_runs_in_one_thread(self, tmp_path: Path) -> None:
        services = [_service("s0")] + [_service(f"s{i}", after=[f"s{i - 1}"]) for i in range(1, 6)]
        applied, trace = _apply_traced(services, tmp_path)
        assert [s.status for s in applied.services] == ["started"] * 6
        assert len({thread for _, _, thread in trace.events}) == 1
        assert [n for kind, n, _ in trace.events if kind == "start"] == [f"s{i}" for i in range(6)]

    def test_a_fan_out_starts_its_branches_together(self, tmp_path: Path) -> None:
        """Branches made ready at once start concurrently: each start waits (a barrier) until
        all three have begun, which only other threads can make happen. The first branch
        runs on in the thread of what made it ready."""
        barrier = threading.Barrier(3, timeout=30)

        class Overlapping(RecordingBackend):
            def start(self, service: Any, *, fingerprint: str) -> Any:
                if service.name.startswith("b"):
                    barrier.wait()
                return super().start(service, fingerprint=fingerprint)

        services = [_service("root")] + [_service(f"b{i}", need=["root"]) for i in range(3)]
        applied, trace = _apply_traced(services, tmp_path, backend=Overlapping(tmp_path))
        assert [s.status for s in applied.services] == ["started"] * 4
        assert trace.thread("b0") == trace.thread("root")
        assert len({trace.thread(f"b{i}") for i in range(3)}) == 3

    def test_no_thread_to_be_had_leaves_the_work_to_the_caller(
        self, tmp_path: Path, refuse_threads: Callable[[str], None]
    ) -> None:
        """When a thread for the services ready meanwhile (or for the crash watch) cannot be
        started, the caller runs them itself, one after another: nothing fails, nothing hangs."""
        refuse_threads("apply")
        services = [_service("root")] + [_service(f"b{i}", need=["root"]) for i in range(3)]
        applied, trace = _apply_traced(services, tmp_path)
        assert [s.status for s in applied.services] == ["started"] * 4
        assert {thread for _, _, thread in trace.events} == {threading.current_thread()}

    def test_nothing_to_wait_for_needs_no_thread(self, tmp_path: Path) -> None:
        """A re-apply that finds every service running, and steps that wait for nothing, run
        in the calling thread: no thread is started for a service."""
        (tmp_path / "etc").mkdir()
        services = [
            _service("a", pre_start=[noderole.WriteFile(path="/etc/a.conf", content="x\n")]),
            _service(
                "b",
                after=["a"],
                pre_start=[noderole.WaitForPaths(paths=["/etc/a.conf"], timeout=30)],
            ),
            _service("c", pre_start=[noderole.Call(function=lambda ctx: None, description="c")]),
        ]
        backend = RecordingBackend(tmp_path)
        first, _ = _apply_traced(services, tmp_path, backend=backend)
        assert [s.status for s in first.services] == ["started"] * 3
        again, trace = _apply_traced(services, tmp_path, backend=backend)
        assert [s.status for s in again.services] == ["running"] * 3
        assert {thread for _, _, thread in trace.events} == {threading.current_thread()}

    def test_a_wait_lets_the_services_ready_meanwhile_go_on(self, tmp_path: Path) -> None:
        """The first service waits for a file the second (independent) one writes: the wait
        does not hold the second back, or it would last its whole 30 s and fail."""
        services = [
            _service("a", pre_start=[noderole.WaitForPaths(paths=["/run/flag"], timeout=30)]),
            _service("b", pre_start=[noderole.WriteFile(path="/run/flag", content="up\n")]),
        ]
        applied, trace = _apply_traced(services, tmp_path, clock=SystemClock())
        assert [s.status for s in applied.services] == ["started", "started"]
        assert trace.thread("a") != trace.thread("b")

    def test_a_long_call_lets_the_services_ready_meanwhile_go_on(self, tmp_path: Path) -> None:
        """A plugin's Call that waits on its own (no progress) past CALL_PATIENCE counts as
        waiting: the next service, which the Call waits for, runs in another thread."""
        released = threading.Event()

        def hold(ctx: Any) -> None:
            if not released.wait(30):
                raise noderole.StepError("never released")

        services = [
            _service("a", pre_start=[noderole.Call(function=hold, description="hold")]),
            _service(
                "b",
                pre_start=[
                    noderole.Call(function=lambda ctx: released.set(), description="release")
                ],
            ),
        ]
        applied, _ = _apply_traced(services, tmp_path, clock=SystemClock())
        assert [(s.name, s.status) for s in applied.services] == [
            ("a", "started"),
            ("b", "started"),
        ]

    @settings(max_examples=40, deadline=None)
    @given(data=st.data())
    def test_every_service_runs_once_after_what_it_comes_after(
        self, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
    ) -> None:
        """Random graphs: each service starts and finishes exactly once, never before each
        service it comes after has finished."""
        count = data.draw(st.integers(min_value=1, max_value=24), label="services")
        services = []
        for i in range(count):
            earlier = [f"s{j}" for j in range(i)]
            deps = (
                data.draw(st.lists(st.sampled_from(earlier), unique=True, max_size=4)) if i else []
            )
            word = data.draw(st.sampled_from(["after", "need", "want", "use"]))
            services.append(_service(f"s{i}", **{word: deps}))
        applied, trace = _apply_traced(services, tmp_path_factory.mktemp("schedule"))
        assert sorted(s.name for s in applied.services) == sorted(s.name for s in services)
        assert all(s.status == "started" for s in applied.services)
        for kind in ("start", "finish"):
            names = [n for k, n, _ in trace.events if k == kind]
            assert sorted(names) == sorted(s.name for s in services)  # once each
        for service in services:
            for dependency in (*service.after, *service.need, *service.want, *service.use):
                assert trace.index("finish", dependency) < trace.index("start", service.name)
